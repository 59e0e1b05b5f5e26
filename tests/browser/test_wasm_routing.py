"""The wasm kernels for the real models (web/kernels/conv.c, batchnorm.c, exp_erf.c (Exp, Erf, Tanh),
layernorm.c, softmax.c, softmax_ce.c, gather_grad.c, gemm_ops.c, Clip in elementwise.c; Pow by 2 or 3
as products) where they really run: Pyodide 0.17.1 (numpy 1.17.5) with kernels.wasm linked into its heap (bench/pages/kernels_check.html), pytrain from
this checkout. After pytrain.ops.wasm.install() every accelerated kernel must answer the cases it
takes (no silent fallback to numpy) with the numpy kernel's result, and decline the rest."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser_helpers import checkout_page, pytrain_sources

ROOT = Path(__file__).resolve().parents[2]
PYODIDE = ROOT / "node_modules" / "@pyodide" / "pyodide" / "dist" / "pyodide.js"   # the site's (python build.py test installs it)

CHECK = r"""
import json
import numpy as np
from pytrain.ops import OpContext, backend, get_kernel, linalg, wasm
from pytrain.ops.wasm import conv as wconv, elementwise as welem, gather as wgather, linalg as wlinalg
from pytrain.ops.wasm import normalization as wnorm, optimizer as wopt, softmax as wsoftmax
from pytrain.ops.registry import PYTRAIN_DOMAIN

assert wasm.install()
rng = np.random.RandomState(3)
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
all3 = OpContext(output_mask=(True, True, True))
out = {}

def compare(name, op, args, kw=None, domain="", ctx=None, fast=None):
    info = get_kernel(op, domain)
    ctx = ctx or OpContext()
    kw = kw or {}
    got = fast(ctx, *args, **kw) if fast else info.fn(ctx, *args, **kw)
    answered = got is not None
    if got is None:
        got = info.numpy_fn(ctx, *args, **kw)
    want = info.numpy_fn(ctx, *args, **kw)
    errs = []
    for g, w in zip(got, want):
        if w is None:
            errs.append(None if g is None else -1.0)
            continue
        w64 = np.asarray(w, np.float64)
        scale = max(1.0, float(np.max(np.abs(w64)))) if w64.size else 1.0
        errs.append(float(np.max(np.abs(np.asarray(g, np.float64) - w64))) / scale if w64.size else 0.0)
    out[name] = {"answered": answered, "err": errs}

x = f32(4, 24, 20, 20) * 4
compare("clip", "Clip", (x, np.array(0, np.float32), np.array(6, np.float32)), fast=welem.clip)
compare("batchnorm", "BatchNormalization", (x, f32(24), f32(24), f32(24), np.abs(f32(24)) + 0.5),
        {"epsilon": 1e-3}, fast=wnorm.batch_normalization)
compare("conv_depthwise", "Conv", (x, f32(24, 1, 3, 3), f32(24)),
        {"group": 24, "pads": [1, 1, 1, 1], "strides": [2, 2]}, fast=wconv.conv)
compare("conv_pointwise", "Conv", (x, f32(40, 24, 1, 1), f32(40)), fast=wconv.conv)
compare("conv_pointwise_small", "Conv", (f32(16, 32, 6, 6), f32(192, 32, 1, 1), None), fast=wconv.conv)
compare("conv_regular", "Conv", (x, f32(8, 24, 3, 3), None), fast=wconv.conv)  # conv.c conv2d
# BatchNormTraining's five outputs (the running statistics in the kernel's call when float32, else numpy's update)
all5 = OpContext(output_mask=(True,) * 5)
bn_train = (x, f32(24), f32(24), f32(24), np.abs(f32(24)) + 0.5)
out["bn_running_in_kernel"] = wnorm.RUNNING_IN_KERNEL
compare("batchnorm_training", "BatchNormTraining", bn_train, {"epsilon": 1e-3, "momentum": 0.8},
        domain=PYTRAIN_DOMAIN, ctx=all5, fast=wnorm.batchnorm_training)
compare("batchnorm_training_f64_running", "BatchNormTraining", bn_train[:3] + tuple(v.astype(np.float64)
        for v in bn_train[3:]), {"epsilon": 1e-3}, domain=PYTRAIN_DOMAIN, ctx=all5, fast=wnorm.batchnorm_training)
compare("batchnorm_training_no_running", "BatchNormTraining", bn_train, domain=PYTRAIN_DOMAIN,
        ctx=OpContext(output_mask=(True, False, False, True, True)), fast=wnorm.batchnorm_training)
# HardSigmoid/HardSwish and their gradients on squeeze-excite's small maps (elementwise.py HARD_MIN_ELEMENTS)
se, se_dy = f32(8, 72, 1, 1) * 4, f32(8, 72, 1, 1)
compare("hard_sigmoid_small", "HardSigmoid", (se,), {"alpha": 0.2, "beta": 0.5}, fast=welem.hard_activation(1))
compare("hard_swish_small", "HardSwish", (se,), fast=welem.hard_activation(2))
compare("hard_sigmoid_grad_small", "HardSigmoidGrad", (se_dy, se), {"alpha": 0.2, "beta": 0.5}, domain=PYTRAIN_DOMAIN,
        fast=welem.hard_activation_grad(1))
compare("hard_swish_grad_small", "HardSwishGrad", (se_dy, se), domain=PYTRAIN_DOMAIN,
        fast=welem.hard_activation_grad(2))
g = f32(32, 32, 512)
compare("erf", "Erf", (g,), fast=welem.unary("erf"))
compare("exp", "Exp", (-g * g,), fast=welem.unary("exp"))
h = f32(8, 32, 128) * 2 + 1
mean_std = get_kernel("LayerNormalization").numpy_fn(all3, h, f32(128), f32(128))
compare("layernorm", "LayerNormalization", (h, f32(128), f32(128)), ctx=all3,
        fast=wnorm.layer_normalization)
compare("layernorm_grad", "LayerNormalizationGrad", (f32(8, 32, 128), h, f32(128), mean_std[1], mean_std[2]),
        domain=PYTRAIN_DOMAIN, ctx=all3, fast=wnorm.layer_normalization_grad)
compare("softmax", "Softmax", (f32(8, 2, 32, 32) * 3,), fast=wsoftmax.softmax)
nan_row = f32(4, 8)
nan_row[1, 2] = np.nan
compare("softmax_nan_declined", "Softmax", (nan_row,), fast=wsoftmax.softmax)
idx = rng.randint(-100, 100, (16, 32)).astype(np.int64)
compare("gather_grad", "GatherGrad", (f32(16, 32, 64), idx, np.zeros((100, 64), np.float32)),
        domain=PYTRAIN_DOMAIN, fast=wgather.gather_grad)
compare("gemm_bias", "Gemm", (f32(64, 784), f32(128, 784), f32(128)), {"transB": 1}, fast=wlinalg.gemm)
compare("gemm_small_declined", "Gemm", (f32(4, 8), f32(8, 3), f32(3)), fast=wlinalg.gemm)
compare("sum_to_shape_3d", "SumToShape", (f32(8, 32, 128), np.zeros(128, np.float32)), domain=PYTRAIN_DOMAIN,
        fast=welem.sum_to_shape)
compare("sum_to_shape_middle_declined", "SumToShape", (f32(8, 32, 128), np.zeros((32, 1), np.float32)),
        domain=PYTRAIN_DOMAIN, fast=welem.sum_to_shape)
for code, (name, op) in enumerate((("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("div", "Div"))):
    compare(name + "_row", op, (f32(32, 32, 128), f32(128)), fast=welem.binary(code))
    compare(name + "_scalar_left", op, (np.array(1.5, np.float32), f32(32, 32, 128)), fast=welem.binary(code))
compare("add_middle_broadcast_declined", "Add", (f32(32, 2, 32, 32), f32(32, 1, 1, 32)),
        fast=welem.binary(0))
# GPT-2's tanh-form GELU: Tanh, and Pow by 3 (forward) and 2 (its gradient) as products
compare("tanh", "Tanh", (g,), fast=welem.unary("tanh"))
compare("pow3", "Pow", (g, np.array(3.0, np.float32)), fast=welem.power)
compare("pow2", "Pow", (g, np.array(2, np.int64)), fast=welem.power)
compare("pow_other_declined", "Pow", (np.abs(g), np.array(0.5, np.float32)), fast=welem.power)
# a language model's loss: (N, C, T) logits, a Transpose(0, 2, 1) view of the head's (N, T, C) output
logits = np.transpose(f32(4, 16, 300) * 3, (0, 2, 1))
tokens = rng.randint(0, 300, (4, 16)).astype(np.int64)
ce = wsoftmax.softmax_cross_entropy(all3, logits, tokens, ignore_index=-100)   # log_prob: a class-last view
compare("sce_class_last", "SoftmaxCrossEntropyLoss", (logits, tokens), {"ignore_index": -100}, ctx=all3,
        fast=wsoftmax.softmax_cross_entropy)
compare("sce_grad_class_last", "SoftmaxCrossEntropyLossGrad", (np.array(0.7, np.float32), ce[1], tokens),
        {"ignore_index": -100}, domain=PYTRAIN_DOMAIN, fast=wsoftmax.softmax_cross_entropy_grad)
# (N, C, T) scores laid out as they are: softmax_ce.c's planes, class axis 1 read in place
compare("sce_planes_3d", "SoftmaxCrossEntropyLoss", (np.ascontiguousarray(logits), tokens), ctx=all3,
        fast=wsoftmax.softmax_cross_entropy)
# pytrain.fusion's Conv + BatchNormalization + Clip node: the clip in wasm, in place
bn = (f32(40), f32(40), f32(40), np.abs(f32(40)) + 0.5)
compare("fused_conv_clip", "FusedConv", (x, f32(40, 24, 1, 1), f32(40)) + bn + (np.array(0, np.float32),
        np.array(6, np.float32)), {"clip": 1, "epsilon": 1e-3}, domain=PYTRAIN_DOMAIN, fast=wconv.fused_conv)
from pytrain.device import module
grads = [f32(128, 784), f32(128), np.arange(3), f32(10, 128), f32(10)]
clean = module.first_non_finite(grads)
grads[3][5, 7] = np.inf
out["first_non_finite"] = {"answered": wopt.first_non_finite(grads) == 3 and clean == -1,
                           "err": [float(module.first_non_finite(grads) != 3)],
                           "routed": backend.get("finite") is wopt.first_non_finite}
# attention's batched products through linalg (forward and MatMulGrad's transposed views)
q, k = f32(8, 2, 32, 64), f32(8, 2, 64, 32)
calls = []
orig = wasm.kernels.sgemm_batched
got = linalg.matmul(q, k)
out["matmul_batched"] = {"answered": wlinalg.matmul_batched(q, k) is not None,
                         "err": [float(np.max(np.abs(got - np.matmul(q, k))))]}
kt = np.swapaxes(k, -1, -2)
out["matmul_batched_transposed"] = {
    "answered": wlinalg.matmul_batched(q, np.swapaxes(kt, -1, -2)) is not None,
    "err": [float(np.max(np.abs(linalg.matmul(q, np.swapaxes(kt, -1, -2)) - np.matmul(q, k))))]}
# the kernels' addresses read from numpy's array struct (address.py) in wasm32: views at offsets, reversed and
# strided views, ids reused after collection, a buffer reallocated in place; __array_interface__ the oracle
from pytrain.ops.wasm import address
iface = lambda a: a.__array_interface__["data"][0]
base = np.arange(7 * 9 * 5, dtype=np.float32).reshape(7, 9, 5)
wrong = [i for i, a in enumerate([base, base[1:], base[3:, 2:, 1:], base[2, 4], base[::-1], base[:, ::-2, 1:],
                                  base.reshape(-1)[17:], base.T, np.empty(0, np.float32), np.zeros(())])
         if wasm.ptr(a) != iface(a)]
seen, reused = {}, 0
for k in range(2000):
    a = np.full(16 + (k % 7) * 8, k, np.float32)[k % 3:]
    if wasm.ptr(a) != iface(a):
        wrong.append("reuse %d" % k)
    reused += id(a) in seen and seen[id(a)] != iface(a)
    seen[id(a)] = iface(a)
    del a
grown = np.zeros(8, np.float32)
grown.resize(1 << 20, refcheck=False)
if wasm.ptr(grown) != iface(grown):
    wrong.append("resized")
out["addresses"] = {"direct": address.DIRECT, "wrong": wrong, "reused": reused}
# the registry routes the accelerated kernels (install() put them in front)
out["routed"] = sorted(op for op in ("Add", "Clip", "BatchNormalization", "Conv", "Erf", "Exp", "Gemm",
                                     "LayerNormalization", "Softmax", "Tanh", "Pow")
                       if get_kernel(op).fn is not get_kernel(op).numpy_fn)
json.dumps(out)
"""


@pytest.fixture(scope="module")
def results(browser):
    if not PYODIDE.exists():
        pytest.skip("needs node_modules (npm ci; python build.py test runs it)")
    with checkout_page(browser, "/bench/pages/kernels_check.html") as page:
        page.evaluate("window.__ready")
        page.evaluate("paths => window.__loadSources(paths)", pytrain_sources())
        return json.loads(page.evaluate("code => window.__py(code)", CHECK))


ANSWERED = ["add_row", "sub_row", "mul_row", "div_row", "add_scalar_left", "sub_scalar_left",
            "mul_scalar_left", "div_scalar_left", "sum_to_shape_3d", "gemm_bias", "clip", "fused_conv_clip",
            "first_non_finite", "batchnorm", "batchnorm_training", "batchnorm_training_f64_running",
            "batchnorm_training_no_running", "hard_sigmoid_small", "hard_swish_small", "hard_sigmoid_grad_small",
            "hard_swish_grad_small", "conv_depthwise", "conv_pointwise", "conv_pointwise_small", "conv_regular",
            "erf", "exp", "tanh", "pow3", "pow2", "sce_class_last", "sce_grad_class_last", "sce_planes_3d", "layernorm",
            "layernorm_grad", "softmax", "gather_grad", "matmul_batched",
            "matmul_batched_transposed"]


@pytest.mark.parametrize("name", ANSWERED)
def test_kernel_answers_with_the_numpy_result(results, name):
    r = results[name]
    assert r["answered"], "%s fell back to numpy" % name
    for e in r["err"]:
        assert e is None or 0 <= e <= 2e-6, (name, r["err"])


@pytest.mark.parametrize("name", ["softmax_nan_declined", "gemm_small_declined",
                                  "sum_to_shape_middle_declined", "add_middle_broadcast_declined",
                                  "pow_other_declined"])
def test_kernel_declines_what_it_does_not_take(results, name):
    assert not results[name]["answered"]


def test_install_routes_the_finite_check(results):
    assert results["first_non_finite"]["routed"]


def test_install_routes_the_ops(results):
    assert results["routed"] == ["Add", "BatchNormalization", "Clip", "Conv", "Erf", "Exp", "Gemm",
                                 "LayerNormalization", "Pow", "Softmax", "Tanh"]


def test_addresses_are_read_from_the_array_struct_and_exact(results):
    """In wasm32 the kernels' addresses come from the array's own data field (address.py), equal to
    __array_interface__'s for views at offsets and for ids reused with another buffer."""
    r = results["addresses"]
    assert r["direct"] and r["wrong"] == [] and r["reused"] > 0, r


def test_batchnorm_training_updates_the_running_statistics_in_the_kernel(results):
    """The page's batchnorm_training takes the running statistics (its 16 parameters), so the route passes them."""
    assert results["bn_running_in_kernel"]
