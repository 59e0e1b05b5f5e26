"""The WebGPU device (web/gpu/webgpu.js's WGSL shaders, pytrain/ops/webgpu, pytrain/device/webgpu.py) where it
really runs: headless Chromium's SwiftShader adapter (``--enable-unsafe-webgpu``), Pyodide 0.17.1 with pytrain
from this checkout (bench/pages/webgpu_check.html). Every shader against the numpy kernel, forward and gradient,
on odd sizes and broadcasts; the digits MLP trained 20 steps on the GPU against the same steps on the CPU.
The WebGPU Chromium and its page (``gpu_browser``, ``gpu_page``) are conftest.py's, shared by the WebGPU modules; the
app's pages here (the page runs, the widget) assert nothing about a first visit, so they share one context of that
browser (``warm_gpu_context``), its site storage cleared after each run."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ENQUEUE_OPS = r"""
import numpy as np
from pytrain.ops import OpContext, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.ops.webgpu import device
from pytrain.ops.webgpu import kernels as K

dev = device()
rng = np.random.RandomState(5)
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
CASES = []   # (name, op, domain, args, attrs, ctx, gpu outputs, host arrays they land in)

def case(name, op, args, attrs=None, domain="", ctx=None, cpu=(), gpu=()):
    # tensors go up (labels with their host copy); scalars (but those in gpu) and the indices in cpu stay numpy
    ctx = ctx or OpContext(output_mask=(True, True))
    attrs = attrs or {}
    gpu_args = [a if (a.ndim == 0 and i not in gpu) or i in cpu else dev.upload(a, keep_host=a.dtype.kind == "i")
                for i, a in enumerate(args)]
    outs = K.KERNELS[(domain, op)](ctx, *gpu_args, **attrs)
    assert outs is not None, name + " declined"
    boxes = []
    for o in outs:
        box = None if o is None else np.full(o.shape, np.nan, np.float32)
        if o is not None:
            o.read_into(box)
        boxes.append(box)
    CASES.append((name, op, domain, args, attrs, ctx, outs, boxes))

case("gemm_transB_row_bias", "Gemm", [f32(7, 13), f32(5, 13), f32(5)], {"transB": 1})
case("gemm_transA_alpha", "Gemm", [f32(13, 7), f32(13, 5)], {"transA": 1, "alpha": 0.5})
case("gemm_full_bias", "Gemm", [f32(33, 65), f32(65, 17), f32(33, 17)])
case("gemm_scalar_bias_both_transposed", "Gemm", [f32(9, 3), f32(11, 9), f32(1)], {"transA": 1, "transB": 1})
case("matmul_2d", "MatMul", [f32(33, 65), f32(65, 17)])
case("matmul_batched", "MatMul", [f32(2, 3, 4), f32(2, 4, 6)])
case("matmul_broadcast_right", "MatMul", [f32(3, 7, 13), f32(13, 5)])
case("matmul_broadcast_left", "MatMul", [f32(7, 13), f32(3, 13, 5)])
for code, op in enumerate(("Add", "Sub", "Mul", "Div")):
    case(op.lower() + "_middle_broadcast", op, [f32(4, 1, 5), f32(3, 1) + 3])
    case(op.lower() + "_row", op, [f32(2, 3, 5), f32(5) + 3])
    case(op.lower() + "_scalar_left", op, [np.array(1.5, np.float32), f32(7, 3)])
    case(op.lower() + "_same", op, [f32(1001), f32(1001) + 3])
case("relu_odd", "Relu", [f32(1001)])
y = np.maximum(f32(37, 11), 0)
case("relu_grad", "ReluGrad", [f32(37, 11), y], domain=PYTRAIN_DOMAIN)
case("sum_to_shape_bias", "SumToShape", [f32(37, 11), np.zeros(11, np.float32)], domain=PYTRAIN_DOMAIN)
case("sum_to_shape_row", "SumToShape", [f32(5, 7, 3), np.zeros((1, 3), np.float32)], domain=PYTRAIN_DOMAIN)
case("sum_to_shape_column", "SumToShape", [f32(4, 6), np.zeros((4, 1), np.float32)], domain=PYTRAIN_DOMAIN)
case("reduce_sum_middle_keepdims", "ReduceSum", [f32(3, 4, 5), np.array([1], np.int64)], cpu=(1,))
case("reduce_sum_leading", "ReduceSum", [f32(3, 4, 5), np.array([0, 1], np.int64)], {"keepdims": 0}, cpu=(1,))
labels = rng.randint(0, 10, 37).astype(np.int64)
case("softmax_ce_mean", "SoftmaxCrossEntropyLoss", [f32(37, 10) * 3, labels], {"reduction": "mean"})
ignored = labels.copy()
ignored[[2, 9]] = -100
case("softmax_ce_sum_ignored", "SoftmaxCrossEntropyLoss", [f32(37, 10) * 3, ignored],
     {"reduction": "sum", "ignore_index": -100})
lp = get_kernel("SoftmaxCrossEntropyLoss").numpy_fn(OpContext(output_mask=(True, True)), f32(37, 10), labels)[1]
case("softmax_ce_grad_mean", "SoftmaxCrossEntropyLossGrad", [np.array(1.0, np.float32), lp, labels],
     {"reduction": "mean"}, domain=PYTRAIN_DOMAIN)
case("softmax_ce_grad_ignored", "SoftmaxCrossEntropyLossGrad", [np.array(0.5, np.float32), lp, ignored],
     {"reduction": "mean", "ignore_index": -100}, domain=PYTRAIN_DOMAIN)
case("softmax_ce_grad_sum_dloss_on_gpu", "SoftmaxCrossEntropyLossGrad", [np.array(0.25, np.float32), lp, labels],
     {"reduction": "sum"}, domain=PYTRAIN_DOMAIN, gpu=(0,))
for name, attrs in (("adamw", {"weight_decay": 0.01, "decoupled": 1}), ("adam_l2", {"weight_decay": 0.1}),
                    ("adam", {})):
    group = [f32(13, 7), f32(13, 7), f32(13, 7) * 0.1, np.abs(f32(13, 7)) * 0.01, f32(5), f32(5), f32(5) * 0.1,
             np.abs(f32(5)) * 0.01]
    case(name, "AdamStep", [np.array(0.01, np.float32), np.array(3, np.int64)] + group, attrs,
         domain=PYTRAIN_DOMAIN, ctx=OpContext(output_mask=(True,) * 6))
case("sgd", "SGDStep", [np.array(0.1, np.float32), np.array(1, np.int64), f32(9, 3), f32(9, 3)],
     domain=PYTRAIN_DOMAIN)
# CNN: odd sizes, padding, strides, dilations; MaxPool overlapping and not; MaxPoolGrad on the GPU's indices
conv_odd = {"pads": [1, 0, 1, 1], "strides": [2, 1], "dilations": [1, 2]}
case("conv_odd", "Conv", [f32(2, 3, 9, 7), f32(4, 3, 3, 2), f32(4)], conv_odd)
case("conv_no_bias_stride", "Conv", [f32(3, 2, 8, 8), f32(5, 2, 3, 3)], {"strides": [2, 2]})
case("conv_grad_odd", "ConvGrad", [f32(2, 4, 5, 6), f32(2, 3, 9, 7), f32(4, 3, 3, 2)], conv_odd,
     domain=PYTRAIN_DOMAIN, ctx=OpContext(output_mask=(True, True, True)))
case("conv_grad_lenet_no_dx", "ConvGrad", [f32(4, 6, 24, 24), f32(4, 1, 28, 28), f32(6, 1, 5, 5)],
     {"kernel_shape": [5, 5]}, domain=PYTRAIN_DOMAIN, ctx=OpContext(output_mask=(False, True, True)))
pool_overlap = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
case("max_pool_overlap", "MaxPool", [f32(2, 3, 7, 9)], pool_overlap, ctx=OpContext(output_mask=(True, False)))
case("max_pool_2x2", "MaxPool", [f32(4, 6, 24, 24)], {"kernel_shape": [2, 2], "strides": [2, 2]},
     ctx=OpContext(output_mask=(True, False)))
for name, x, attrs in (("max_pool_grad_overlap", f32(2, 3, 7, 9), pool_overlap),
                       ("max_pool_grad_2x2", f32(4, 6, 24, 24), {"kernel_shape": [2, 2], "strides": [2, 2]})):
    cpu_y, cpu_idx = get_kernel("MaxPool").numpy_fn(OpContext(output_mask=(True, True)), x, **attrs)
    gx = dev.upload(x)
    _, gpu_idx = K.KERNELS[("", "MaxPool")](OpContext(output_mask=(True, True)), gx, **attrs)
    dy = f32(*cpu_y.shape)
    outs = K.KERNELS[(PYTRAIN_DOMAIN, "MaxPoolGrad")](OpContext(), dev.upload(dy), gpu_idx, gx)
    box = np.full(x.shape, np.nan, np.float32)
    outs[0].read_into(box)
    CASES.append((name, "MaxPoolGrad", PYTRAIN_DOMAIN, [dy, cpu_idx, x], {}, OpContext(), outs, [box]))
# embedding models: rows gathered (a negative index too) and their gradient, LayerNorm, ReduceMean, ReduceGrad
ids = rng.randint(-11, 11, (3, 4)).astype(np.int64)
case("gather_rows", "Gather", [f32(11, 5), ids])
case("gather_rows_grad", "GatherGrad", [f32(3, 4, 5), ids, np.zeros((11, 5), np.float32)], domain=PYTRAIN_DOMAIN)
case("layernorm", "LayerNormalization", [f32(6, 7, 13) * 3 + 1, f32(13), f32(13)],
     ctx=OpContext(output_mask=(True, True, True)))
case("layernorm_no_bias", "LayerNormalization", [f32(5, 33), f32(33)], {"epsilon": 1e-3},
     ctx=OpContext(output_mask=(True, True, True)))
lx = f32(6, 7, 13) * 3 + 1
_, lmean, linv = get_kernel("LayerNormalization").numpy_fn(OpContext(output_mask=(True, True, True)), lx, f32(13))
case("layernorm_grad", "LayerNormalizationGrad", [f32(6, 7, 13), lx, f32(13), lmean, linv], domain=PYTRAIN_DOMAIN,
     ctx=OpContext(output_mask=(True, True, True)))
case("reduce_mean_middle", "ReduceMean", [f32(3, 4, 5), np.array([1], np.int64)], cpu=(1,))
case("reduce_mean_tokens_no_keep", "ReduceMean", [f32(8, 32, 6), np.array([1], np.int64)], {"keepdims": 0}, cpu=(1,))
case("reduce_grad_mean", "ReduceGrad", [f32(3, 1, 5), f32(3, 4, 5), np.array([1], np.int64)], {"mode": "mean"},
     domain=PYTRAIN_DOMAIN, cpu=(2,))
case("reduce_grad_sum_no_keep", "ReduceGrad", [f32(3, 5), f32(3, 4, 5), np.array([-2], np.int64)], {"keepdims": 0},
     domain=PYTRAIN_DOMAIN, cpu=(2,))
case("softmax_rows", "Softmax", [f32(6, 7, 13) * 4], ctx=OpContext(output_mask=(True,), opset=17))
case("softmax_rows_opset11_last_axis", "Softmax", [f32(5, 33) * 4], {"axis": 1}, ctx=OpContext(output_mask=(True,), opset=11))
sy = get_kernel("Softmax").numpy_fn(OpContext(opset=17), f32(6, 7, 13) * 4)[0]
case("softmax_grad_rows", "SoftmaxGrad", [f32(6, 7, 13), sy], domain=PYTRAIN_DOMAIN)
case("flatten_view", "Flatten", [f32(3, 4, 5)])
case("reshape_view", "Reshape", [f32(3, 4, 5), np.array([0, -1], np.int64)], cpu=(1,))
len(CASES)
"""

COMPARE_OPS = r"""
import json
out = {}
for name, op, domain, args, attrs, ctx, outs, boxes in CASES:
    want = get_kernel(op, domain).numpy_fn(ctx, *[a.copy() if isinstance(a, np.ndarray) else a for a in args],
                                           **attrs)
    errs = []
    for w, b in zip(want, boxes):
        if b is None:   # (an output not asked for)
            continue
        w64 = np.asarray(w, np.float64)
        if w64.shape != b.shape:
            errs.append("shape %s != %s" % (b.shape, w64.shape))
            continue
        scale = max(1.0, float(np.max(np.abs(w64)))) if w64.size else 1.0
        errs.append(float(np.max(np.abs(b - w64))) / scale if w64.size else 0.0)
    out[name] = errs
json.dumps(out)
"""

# Where a gradient element is at float32's accumulation noise, its sign is the summation order's, and Adam's step
# lr * m/(sqrt(v) + eps) turns it into a step of up to lr (the bias-corrected m/sqrt(v) is at most ~1 over these
# first steps), which its moments carry on. Data seed 3's fc1.weight[121, 617] at step 1: +2.1e-10 in float64,
# -4.7e-10 on the CPU, 0 on the GPU (the tensor's largest gradient 2.3e-2): the CPU steps it by -4.5e-4, the GPU not,
# 1.2 % of fc1.weight's largest value after 4 steps, while the losses agree within 1e-5. Below noise the same holds in
# proportion: a gradient whose error bound is a share s of it moves Adam's step by up to ~lr * s (m/sqrt(v) is
# scale-free), and the moments carry it into every later step. The error bound: float32's summation bound,
# n * 2**-24 * the same sums over the terms' absolute values, n = 64 (the path's 16 batch + 10 class terms and the
# softmax's, for both paths). Each element may differ by 2 * lr * the sum over the steps of the largest share it has
# reached (1 at noise: the two paths stepping opposite ways); elements at noise must stay a handful.
NOISE = r"""
def f64_grads(P, x, y, mag=False):
    # the digits MLP (784-128-10, ReLU, mean cross-entropy) in float64; with ``mag`` each gradient's magnitude: the
    # same sums over the terms' absolute values, what float32's summation error is proportional to
    W1, b1, W2, b2 = [P[n].astype(np.float64) for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")]
    x = x.astype(np.float64)
    pre = x @ W1.T + b1
    h = np.maximum(pre, 0.0)
    z = h @ W2.T + b2
    e = np.exp(z - z.max(1, keepdims=True))
    d = e / e.sum(1, keepdims=True)
    onehot = np.zeros_like(d)
    onehot[np.arange(len(y)), y] = 1.0
    if mag:
        x, W2, d = np.abs(x), np.abs(W2), d + onehot
        h = (x @ np.abs(W1).T + np.abs(b1)) * (pre > 0)
    else:
        d = d - onehot
    d = d / len(y)
    dh = (d @ W2) * (pre > 0)
    return {"fc1.weight": dh.T @ x, "fc1.bias": dh.sum(0), "fc2.weight": d.T @ h, "fc2.bias": d.sum(0)}

def mark_noise(noise, params, names, x, y):
    # noise[n][0]: each element's largest share so far (its gradient's error bound over the gradient, at most 1);
    # noise[n][1]: those summed over the steps, the steps of lr each element may differ by (times 2)
    exact, mag = f64_grads(params, x, y), f64_grads(params, x, y, mag=True)
    for n in names:   # (a dead unit's exact zeros, magnitude 0, are not noise: both paths must give 0)
        bound = 64 * 2.0 ** -24 * mag[n]
        share = np.where(mag[n] > 0, np.minimum(1.0, bound / np.maximum(np.abs(exact[n]), 1e-300)), 0.0)
        v = noise.setdefault(n, np.zeros((2,) + share.shape))
        np.maximum(v[0], share, out=v[0])
        v[1] += v[0]

def allowance(noise, n, lr=0.01):   # how far parameter n's elements may differ: 2 lr x their summed shares
    return noise[n][1] * (2 * lr) if n in noise else 0.0

def at_noise(noise):   # per tensor: its elements whose gradient was at noise (a whole step's share), its size
    return {n: [int((v[0] >= 1).sum()), int(v[0].size)] for n, v in noise.items()}

def rel(a, b, allow=0.0):
    return float(np.max(np.maximum(np.abs(a - b) - allow, 0.0)) / max(1e-6, float(np.max(np.abs(b)))))

def compare(got, want, noise, lr=0.01):
    # checkpoints got and want (bytes): each parameter's and moment's largest difference relative to want's largest
    # value, beyond what mark_noise allows; and got's optimizer step
    got, want = api.CheckpointState.load_checkpoint(got), api.CheckpointState.load_checkpoint(want)
    params = {n: rel(got.parameters[n].data, want.parameters[n].data, allowance(noise, n, lr)) for n in got.parameters}
    moments = {p + "." + s: rel(a, want.optimizer_state.slots[p][s])
               for p, per in got.optimizer_state.slots.items() for s, a in per.items()}
    return params, moments, got.optimizer_state.step
"""

MLP = r"""
import json
import numpy as np
from pytrain.device import api
from pytrain.device.webgpu import GpuTraining
from pytrain.ops import wasm
from pytrain.ops.webgpu import device
from pytrain.webapp.demo import digits_artifacts
""" + NOISE + r"""
wasm.install()   # the CPU path is the page's: the wasm kernels
arts = ARTS if KIND == "given" else digits_artifacts(KIND, OPTIMIZER)
rng = np.random.RandomState(0)
def sample():   # token ids for an embedding model (VOCAB), else pixels
    return rng.randint(0, VOCAB, SHAPE).astype(np.int64) if VOCAB else rng.rand(*SHAPE).astype(np.float32)

batches = [(sample(), rng.randint(0, 10, SHAPE[0]).astype(np.int64)) for _ in range(2)] * 10

def fresh():
    state = api.CheckpointState.load_checkpoint(arts["checkpoint"])
    module = api.Module(arts["training"], state, arts["eval"])
    opt = api.Optimizer(arts["optimizer"], module)
    opt.set_learning_rate(0.01)
    return module, opt

cpu_module, cpu_opt = fresh()
cpu_losses, noise = [], {}
for x, y in batches:
    if KIND == "mlp":   # (the digits MLP's gradients at float32's accumulation noise: NOISE)
        mark_noise(noise, {n: cpu_module.state.parameters[n].data for n in cpu_module.parameter_names},
                   cpu_module.trainable_names, x, y)
    cpu_module.lazy_reset_grad()
    outs = cpu_module(x, y)
    cpu_losses.append(float(np.asarray(outs[0] if isinstance(outs, list) else outs)))
    cpu_opt.step()

gpu_module, gpu_opt = fresh()
before = device().counts()
gpu = GpuTraining(gpu_module, gpu_opt, device())
for k, (x, y) in enumerate(batches):
    gpu.step(x, y)
    if k == 0:
        first = device().counts()   # (the constants computed on the CPU went up once, in the first step)
gpu.to_cpu()
len(batches)
"""

MLP_RESULTS = r"""
gpu.commit()   # the parameters and moments read back (landed: the JS awaited the device) into the state
names = cpu_module.parameter_names
params = {n: rel(gpu_module.state.parameters[n].data, cpu_module.state.parameters[n].data, allowance(noise, n))
          for n in names}
after = device().counts()
json.dumps({"cpu": cpu_losses, "gpu": gpu.take_losses(), "params": params,
            "step": gpu_module.state.optimizer_state.step,
            "noise": at_noise(noise),
            "counts": {k: after[k] - before[k] for k in after},
            "later_uploads": after["uploads"] - first["uploads"]})
"""


def artifacts_setup(arts) -> str:
    """The page's lines defining ``ARTS`` (for ``KIND = 'given'``): a generate_artifacts result or a dict of bytes."""
    if not isinstance(arts, dict):
        arts = {"training": arts.training_model, "eval": arts.eval_model, "optimizer": arts.optimizer_model,
                "checkpoint": arts.checkpoint}
    return ("import base64, json\nARTS = {k: base64.b64decode(v) for k, v in json.loads(%r).items()}\n"
            % json.dumps({k: base64.b64encode(v).decode() for k, v in arts.items()}))


def train_on_page(gpu_page, setup: str, code: str = MLP) -> dict:
    """Run ``setup`` + the training script (20 steps on the CPU, then on the GPU), await the device, and return
    :data:`MLP_RESULTS`."""
    gpu_page.evaluate("code => window.__py(code)", setup + code)
    gpu_page.evaluate("window.__settle()")
    return json.loads(gpu_page.evaluate("code => window.__py(code)", MLP_RESULTS))


REFUSED = r"""
import numpy as np
from pytrain.engine.executor import Plan
from pytrain.ops.webgpu import device, kernels as K
from pytrain.proto import make_graph, make_node, make_value_info
from pytrain.base import dtypes
g = make_graph([make_node("Relu", ["x"], ["r"], name="relu"), make_node("Sigmoid", ["r"], ["y"], name="sig")], "g",
               [make_value_info("x", dtypes.FLOAT, [3])], [make_value_info("y", dtypes.FLOAT, [3])])
plan = Plan(g, ["x"], ["y"], opset=17, kernels=K.choose)
try:
    plan.run([device().upload(np.ones(3, np.float32))])
    msg = "ran"
except Exception as e:
    msg = type(e).__name__ + ": " + str(e)
msg
"""


LIMITS = r"""
import json
import types
import numpy as np
from pytrain.device import api
from pytrain.device.webgpu import GpuTraining
from pytrain.ops.webgpu import GpuTransferError, device
from pytrain.webapp import memory
from pytrain.webapp.demo import digits_artifacts
from pytrain.webapp.gpu_slices import GpuSlices, Slice

arts = digits_artifacts("mlp", "AdamW")
state = api.CheckpointState.load_checkpoint(arts["checkpoint"])
module = api.Module(arts["training"], state, arts["eval"])
opt = api.Optimizer(arts["optimizer"], module)
rng = np.random.RandomState(1)
batch = (rng.rand(16, 784).astype(np.float32), rng.randint(0, 10, 16).astype(np.int64))
est = module.memory_estimate(*batch, optimizer=opt)
dev = device()
out = {"max_buffer": dev.max_buffer, "gpu_memory": dev.memory}

def refused(**limits):
    # the device's limits forced small (as a small GPU's would be): the error, and nothing left allocated
    saved = dev.max_buffer, dev.memory
    before = dev.allocated
    dev.max_buffer = limits.get("max_buffer", dev.max_buffer)
    dev.memory = limits.get("memory", dev.memory)
    try:
        GpuTraining(module, opt, dev, limits.get("estimate"))
        return "trained", dev.allocated - before
    except GpuTransferError as e:
        return str(e), dev.allocated - before
    finally:
        dev.max_buffer, dev.memory = saved

out["buffer"] = refused(max_buffer=200000)
out["memory"] = refused(memory=dev.allocated + 1000000, estimate=est)
out["memory_no_estimate"] = refused(memory=dev.allocated + 1000000)
out["fits"] = refused(estimate=est)[0]
try:
    saved = dev.max_buffer
    dev.max_buffer = 1000
    dev.empty((16, 784))
    out["empty"] = "allocated"
except GpuTransferError as e:
    out["empty"] = str(e)
finally:
    dev.max_buffer = saved

# the page's slices: refused with the reason, the position unchanged, the CPU trains
slices = GpuSlices()
at = types.SimpleNamespace(epoch=0, epoch_step=0, step=0)
dev.memory, saved = 1000000, dev.memory
try:
    out["slice"] = slices.run(module, opt, at, Slice([np.arange(16)], lambda idx: batch, 1000.0, 5))
finally:
    dev.memory = saved
out["slice_refused"] = slices.refused
out["at"] = [at.epoch, at.epoch_step, at.step]
out["summary"] = memory.gpu_summary(module, est)
out["est_total"] = est.total

# the wasm heap's budget lowered (as a model past 2 GiB would find it): the GPU keeps gradients and activations
from pytrain.base import limits as L
from pytrain.errors import LimitError
KEPT = []   # (a slice's loss lands in its GpuSlices' array at the next settle: kept alive until then)
def heap_case(budget):
    saved = L.max_heap_bytes
    L.set_limits(max_heap_bytes=budget)
    s, a = GpuSlices(), types.SimpleNamespace(epoch=0, epoch_step=0, step=0)
    KEPT.append(s)
    try:
        try:
            module.check_memory(*batch, optimizer=opt)
            cpu = "fits"
        except LimitError as e:
            cpu = str(e)
        try:
            gpu = s.run(module, opt, a, Slice([np.arange(16)], lambda idx: batch, 1000.0, 1))
        except LimitError as e:
            gpu = str(e)
        return [cpu, gpu, s.refused]
    finally:
        L.set_limits(max_heap_bytes=saved)
from pytrain.webapp.gpu_slices import heap_need
heap_kept, heap_least = est.parameters + est.optimizer_state, heap_need(module, est)[0]
out["heap_kept"], out["heap_least"] = heap_kept, heap_least
out["heap_between"] = heap_case((heap_kept + est.total) // 2)
out["heap_below"] = heap_case(heap_least - 1)
json.dumps(out)
"""


def shader_errors(page, cases: str) -> dict:
    """Run ``cases`` (Python calling case(): ENQUEUE_OPS's, or code after it) in the GPU page, let the device
    settle, and compare every case with the numpy kernel: name -> its outputs' largest errors."""
    page.evaluate("code => window.__py(code)", cases)
    page.evaluate("window.__settle()")
    return json.loads(page.evaluate("code => window.__py(code)", COMPARE_OPS))


def assert_within_float32(name: str, errs: list) -> None:
    """Every output of case ``name`` within 2e-6 of the numpy kernel's (float32 accumulation order)."""
    assert errs, name
    for e in errs:
        assert isinstance(e, float) and 0 <= e <= 2e-6, (name, errs)


@pytest.fixture(scope="module")
def op_errors(gpu_page):
    return shader_errors(gpu_page, ENQUEUE_OPS)


OPS = (["gemm_transB_row_bias", "gemm_transA_alpha", "gemm_full_bias", "gemm_scalar_bias_both_transposed",
        "matmul_2d", "matmul_batched", "matmul_broadcast_right", "matmul_broadcast_left"]
       + [op + case for op in ("add", "sub", "mul", "div")
          for case in ("_middle_broadcast", "_row", "_scalar_left", "_same")]
       + ["relu_odd", "relu_grad", "sum_to_shape_bias", "sum_to_shape_row", "sum_to_shape_column",
          "reduce_sum_middle_keepdims", "reduce_sum_leading", "softmax_ce_mean", "softmax_ce_sum_ignored",
          "softmax_ce_grad_mean", "softmax_ce_grad_ignored", "softmax_ce_grad_sum_dloss_on_gpu",
          "adamw", "adam_l2", "adam", "sgd",
          "conv_odd", "conv_no_bias_stride", "conv_grad_odd", "conv_grad_lenet_no_dx", "max_pool_overlap",
          "max_pool_2x2", "max_pool_grad_overlap", "max_pool_grad_2x2", "flatten_view", "reshape_view",
          "gather_rows", "gather_rows_grad", "layernorm", "layernorm_no_bias", "layernorm_grad", "reduce_mean_middle",
          "reduce_mean_tokens_no_keep", "reduce_grad_mean", "reduce_grad_sum_no_keep", "softmax_rows",
          "softmax_rows_opset11_last_axis", "softmax_grad_rows"])


@pytest.mark.parametrize("name", OPS)
def test_shader_matches_the_numpy_kernel(op_errors, name):
    assert_within_float32(name, op_errors[name])


def test_every_gpu_kernel_is_tested(op_errors):
    assert sorted(op_errors) == sorted(OPS)


@pytest.fixture(scope="module", params=["AdamW", "SGD"])
def mlp_run(gpu_page, request):
    return train_on_page(gpu_page, "KIND, SHAPE, OPTIMIZER, VOCAB = 'mlp', (32, 784), %r, 0\n" % request.param)


def test_mlp_trains_on_the_gpu_with_the_cpu_losses(mlp_run):
    cpu, gpu = mlp_run["cpu"], mlp_run["gpu"]
    assert len(gpu) == len(cpu) == 20
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        assert abs(g - c) <= 1e-5 * abs(c), (step, c, g)
    assert cpu[-1] < cpu[0]   # it learns


@pytest.fixture(scope="module")
def cnn_run(gpu_page):
    # the digits CNN (LeNet's ops: Conv, MaxPool, Flatten, Gemm and their gradients), 20 AdamW steps at batch 8
    return train_on_page(gpu_page, "KIND, SHAPE, OPTIMIZER, VOCAB = 'cnn', (8, 1, 28, 28), 'AdamW', 0\n")


def test_cnn_trains_on_the_gpu_with_the_cpu_losses(cnn_run):
    cpu, gpu = cnn_run["cpu"], cnn_run["gpu"]
    assert len(gpu) == len(cpu) == 20
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        assert abs(g - c) <= 1e-5 * abs(c), (step, c, g)
    assert cpu[-1] < cpu[0]   # it learns
    assert cnn_run["step"] == 20
    for name, err in cnn_run["params"].items():
        assert err <= 1e-4, (name, err)
    # every step's Conv, MaxPool and their gradients ran on the GPU: only the batch went up and the loss came down
    counts = cnn_run["counts"]
    assert counts["readbacks"] <= 20 + 3 * len(cnn_run["params"]), counts
    assert counts["uploads"] <= 4 * 20 + 3 * len(cnn_run["params"]) + 10, counts
    print("cnn: losses %s, counts %s" % (gpu[:3], counts))


@pytest.fixture(scope="module")
def emb_run(gpu_page):
    # the bench's embedding model (Embedding(1000, 64) x 32 tokens, LayerNorm, mean over the tokens, Linear 10):
    # Gather, LayerNormalization, ReduceMean and their gradients; 20 AdamW steps at batch 16, not the bench's 64:
    # SwiftShader's run of the steps costs CPU in proportion to the batch (51 CPU s at 64, 13 at 16) and no check
    # here depends on it (512 tokens of 1000 still repeat, so the Gather gradient still sums into a row)
    import dataclasses
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from workloads import WORKLOADS, export_onnx

    from pytrain.generator import artifacts as gen

    emb = dataclasses.replace(WORKLOADS["emb"], input_shape=(16,) + tuple(WORKLOADS["emb"].input_shape[1:]))
    arts = gen.generate_artifacts(export_onnx(emb), loss=gen.LossType.CrossEntropyLoss, optimizer=gen.OptimType.AdamW)
    shape = tuple(emb.input_shape)   # (exported at a fixed batch)
    return train_on_page(gpu_page, artifacts_setup(arts) + "KIND, SHAPE, OPTIMIZER, VOCAB = 'given', %r, 'AdamW', %d\n"
                         % (shape, emb.vocab))


def test_the_embedding_model_trains_on_the_gpu_with_the_cpu_losses(emb_run):
    cpu, gpu = emb_run["cpu"], emb_run["gpu"]
    assert len(gpu) == len(cpu) == 20
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        assert abs(g - c) <= 1e-5 * abs(c), (step, c, g)
    assert cpu[-1] < cpu[0]   # it learns
    for name, err in emb_run["params"].items():
        assert err <= 1e-4, (name, err)
    counts = emb_run["counts"]
    assert counts["readbacks"] <= 20 + 3 * len(emb_run["params"]), counts
    print("emb: losses %s, counts %s" % (gpu[:3], counts))


def test_mlp_parameters_come_back_equal(mlp_run):
    # (elements may differ by what their gradients' float32 error bound allows Adam's steps: NOISE)
    assert mlp_run["step"] == 20
    for name, err in mlp_run["params"].items():
        assert err <= 1e-4, (name, err)
    for name, (noisy, size) in mlp_run["noise"].items():
        assert noisy <= max(4, size // 1000), (name, noisy, size)


def test_a_cpu_node_reading_a_gpu_tensor_is_refused(gpu_page):
    # Sigmoid has no shader: its input would need a GPU -> CPU copy inside the step, which cannot be
    err = gpu_page.evaluate("code => window.__py(code)", REFUSED)
    assert "GpuTransferError" in err and "Sigmoid" in err and "node" in err, err


def test_mlp_reads_back_only_the_losses(mlp_run):
    counts = mlp_run["counts"]
    # per step: the batch and its labels up; the loss down (and the parameters once at the end)
    assert counts["readbacks"] >= 20
    assert counts["readbackBytes"] <= 4 * 20 + 4 * 3 * (784 * 128 + 128 + 128 * 10 + 10)


@pytest.fixture(scope="module")
def app_context(request, gpu_browser):
    """``app_context(recorder)``: the WebGPU browser's context for one app page, recorded by ``recorder`` (the
    shared one, reset after the page's run, or with PYTRAIN_TEST_FIRST_VISITS=1 a fresh one)."""
    from browser_helpers import FIRST_VISITS, fresh_context

    if FIRST_VISITS:
        return lambda recorder: fresh_context(gpu_browser, recorder)
    return request.getfixturevalue("warm_gpu_context").lend


def _train_page(app_context, url: str, epochs: int = 1, lose_after: int = 0, choose: str = "", budget: bool = False,
                then=None):
    """The page at ``url``: the digits MLP built on 1000 digits and trained ``epochs`` epochs (the GPU device
    destroyed once ``lose_after`` losses are in, when given; the Train panel's Device set to ``choose`` first,
    when given); (versions, loss points, epochs, device line, foreign requests, the GPU's counts, the reason the
    GPU was given up, the error shown, the device line before the choice). ``budget``: the worker's heap budget
    set between the parameters + largest moment and the parameters + optimizer state (the state on the GPU only),
    and two more items: the worker's ``checkpoint`` command's bytes (streamed), base64, and whether the optimizer
    state was on the GPU only; ``then(page)``: what it gives, one more item."""
    from browser_helpers import (LOAD_TIMEOUT_MS, Recorder, app_state, app_worker, configure_training, open_app,
                                 wait_ms, wait_ready)

    rec = Recorder()
    with app_context(rec) as ctx:
        page = open_app(ctx, url, rec)
        wait_ready(page)
        page.select_option("#digits-model", "mlp")
        page.select_option("#digits-count", "1000")
        page.click("#digits-build")
        page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready",
                               timeout=LOAD_TIMEOUT_MS)
        before = page.inner_text("#device-status")
        if choose:
            page.select_option("#device", choose)
            page.wait_for_function("() => window.pytrainApp.device.mode === %r && !window.pytrainApp.busy" % choose,
                                   timeout=wait_ms(60_000))
        if budget:
            app_worker(page).evaluate("code => runtime.pyodide.runPython(code)", BUDGET)
        configure_training(page, epochs, batch_size=64, lr=0.002)
        page.click("#start")
        if lose_after:
            page.wait_for_function("() => window.pytrainApp.lossPoints().length >= %d" % lose_after,
                                   timeout=wait_ms(300_000))
            app_worker(page).evaluate("() => runtime.gpu.device.destroy()")
        page.wait_for_function("() => window.pytrainApp.epochs.length >= %d && !window.pytrainApp.training"
                               % epochs, timeout=wait_ms(300_000))
        worker = app_worker(page)
        extra = (worker.evaluate(CHECKPOINT_B64), worker.evaluate(
            "() => runtime.pyodide.runPython('_pt_session.gpu.moments_on_gpu')"), worker.evaluate(GOOD_B64)) \
            if budget else ()
        out = (app_state(page, "a.versions"), page.evaluate("() => window.pytrainApp.lossPoints()"),
               app_state(page, "a.epochs"), page.inner_text("#device-status"), rec.foreign(url),
               worker.evaluate("() => runtime.gpu ? Object.assign({ stateReadbacks: runtime.gpuReadbacks || 0, "
                               "rewound: runtime.gpuRewound, renewals: runtime.gpu.renewals }, runtime.gpu.counts) "
                               ": null"),
               worker.evaluate("() => runtime.gpuLost || null"),
               page.evaluate("() => document.getElementById('error').textContent"), before) + extra
        return out + ((then(page),) if then else ())   # (after the run's own items are read)


#: the worker's heap budget (absolute, as natively) between the parameters + largest moment and the parameters +
#: optimizer state of the page's model at batch 64
BUDGET = r"""
import numpy as np
from pytrain.base import limits as L
from pytrain.webapp.gpu_slices import heap_need
_m = _pt_session.run.module
_est = _m.memory_estimate(*_pt_session.batch(np.arange(64)), optimizer=_pt_session.run.optimizer)
L.heap_now = None
L.set_limits(max_heap_bytes=(heap_need(_m, _est)[0] + _est.parameters + _est.optimizer_state) // 2)
"""

CHECKPOINT_B64 = """async () => {
  const c = await runCommand(COMMAND_TABLE.checkpoint, {});
  let s = "";
  for (let i = 0; i < c.length; i += 32768) s += String.fromCharCode.apply(null, c.subarray(i, i + 32768));
  return btoa(s);
}"""

#: the worker's last good checkpoint streamed at the epoch's end (training.js gpuKeepGood) and Python's position of it
GOOD_B64 = """() => {
  const g = runtime.gpuGood, c = g ? g.checkpoint : new Uint8Array(0);
  let s = "";
  for (let i = 0; i < c.length; i += 32768) s += String.fromCharCode.apply(null, c.subarray(i, i + 32768));
  return { b64: btoa(s), step: g ? g.step : null, python: runtime.pyodide.runPython(
    "import json\\njson.dumps(_pt_session.last_good())") };
}"""


@pytest.fixture(scope="module")
def page_runs(app_context, site_url):
    # the GPU run chooses the GPU in the page (auto leaves SwiftShader alone); the lost one opens with ?gpu=1
    return {"gpu": _train_page(app_context, site_url, choose="on"), "cpu": _train_page(app_context, site_url, 2),
            "lost": _train_page(app_context, site_url + "?gpu=1", 2, lose_after=4)}


def _same_losses(got, want):
    assert len(got) == len(want)
    for (gs, g), (ws, w) in zip(got, want):
        assert gs == ws and abs(g - w) <= 1e-5 * abs(w), (gs, w, g)


def test_the_page_trains_on_the_gpu_with_the_cpu_losses(page_runs):
    gpu_versions, gpu_losses, gpu_epochs, gpu_line, foreign, counts, lost, _, gpu_before = page_runs["gpu"]
    cpu_versions, cpu_losses, cpu_epochs, cpu_line, _, no_gpu, _, _, _ = page_runs["cpu"]
    assert no_gpu is None and lost is None
    # auto: SwiftShader is a software adapter, slower than the wasm kernels: the CPU trains, and the page says why
    for versions, line in ((gpu_versions, gpu_before), (cpu_versions, cpu_line)):
        assert versions["device"].startswith("CPU, ") and versions["gpu"]["mode"] == "auto", versions
        assert "software" in versions["gpu"]["reason"] and "swiftshader" in versions["gpu"]["reason"], versions
        assert line.startswith("Trains on CPU, ") and "software" in line, line
    assert gpu_line.startswith("Trains on GPU: google swiftshader"), gpu_line   # chosen in the page
    # every step ran its shaders on the GPU (16 dispatches a step), and read back its loss
    assert counts["dispatches"] >= 16 * len(gpu_losses) and counts["readbacks"] >= len(gpu_losses), counts
    assert len(gpu_losses) >= 12   # (800 training digits / 64)
    # the parameters stayed on the GPU between slices: besides the losses, the 4 parameters and 8 moments came back
    # only at the epoch's end and for what the CPU read (a save within the epoch)
    state = counts["readbacks"] - len(gpu_losses)
    assert state % 12 == 0 and 12 <= state <= 12 * (1 + counts["stateReadbacks"]), counts
    _same_losses(gpu_losses, cpu_losses[:len(gpu_losses)])
    # after the epoch the parameters came back: the held-out evaluation is the CPU's
    assert abs(gpu_epochs[0]["loss"] - cpu_epochs[0]["loss"]) <= 1e-4 * abs(cpu_epochs[0]["loss"])
    assert not foreign
    print("page: %d steps, GPU counts %s, first losses cpu %s gpu %s" % (len(gpu_losses), counts, cpu_losses[:3],
                                                                        gpu_losses[:3]))


def test_a_lost_device_falls_back_to_the_cpu_with_the_same_losses(page_runs):
    versions, losses, epochs, line, _, counts, lost, shown, before = page_runs["lost"]
    _, cpu_losses, cpu_epochs, _, _, _, _, _, _ = page_runs["cpu"]
    assert versions["device"].startswith("GPU: ") and before.startswith("Trains on GPU: "), (versions, before)  # ?gpu=1
    assert lost and "the CPU trains from step %d" % counts["rewound"] in lost, (lost, counts)   # the last read back
    assert "training continues on the CPU" in shown, shown   # the page says so
    assert line.startswith("Trains on CPU, ") and "the CPU trains from step" in line, line
    _same_losses(losses, cpu_losses)
    assert len(epochs) == 2 and abs(epochs[1]["loss"] - cpu_epochs[1]["loss"]) <= 1e-4 * abs(cpu_epochs[1]["loss"])


@pytest.fixture(scope="module")
def big_page_run(app_context, site_url):
    return _train_page(app_context, site_url, choose="on", budget=True, then=_back_and_reopen)


def test_the_page_trains_past_the_heap_with_the_state_on_the_gpu(big_page_run, page_runs):
    # the optimizer state on the GPU only (test_webgpu_big.py): the epoch's save and the checkpoint command stream it
    import numpy as np

    from pytrain.checkpoint import CheckpointState

    versions, losses, epochs, line, foreign, counts, lost, shown, _, ckpt, on_gpu, _ = big_page_run[:12]
    assert on_gpu
    _, cpu_losses, cpu_epochs, _, _, _, _, _, _ = page_runs["cpu"]
    message = shown.split("Something went wrong:")[-1].split("Nothing trained so far is lost.")[0]
    assert line.startswith("Trains on GPU: ") and lost is None and not message.strip(), (line, lost, shown)
    _same_losses(losses, cpu_losses[:len(losses)])
    assert abs(epochs[0]["loss"] - cpu_epochs[0]["loss"]) <= 1e-4 * abs(cpu_epochs[0]["loss"])
    state = CheckpointState.load_checkpoint(base64.b64decode(ckpt))
    assert state.optimizer_state.step == len(losses)
    slots = state.optimizer_state.slots
    assert sorted(slots) == sorted(n for n in state.parameters) and all(len(v) == 2 for v in slots.values())
    assert all(np.isfinite(a).all() and np.any(a != 0) for v in slots.values() for a in v.values())
    assert not foreign


#: the worker's restoreGood and resumeSaved with the optimizer state on the GPU only: the good checkpoint it holds and
#: the IndexedDB save handed to Python range by range (training.js gpuRestoreGood, gpuReopen)
BACK_AND_REOPEN = """async cmd => {
  const r = await runCommand(COMMAND_TABLE[cmd], {});
  return { step: r.step, epoch: r.epoch, digest: r.digest, savedDigest: r.savedDigest || null, want: r.want || null,
           good: runtime.gpuGood ? runtime.gpuGood.step : null,
           onGpu: runtime.pyodide.runPython("_pt_session.gpu.moments_on_gpu") };
}"""


def _back_and_reopen(page):
    """Back to the good checkpoint, the saved run reopened, then a second epoch: (back, reopened, loss points)."""
    from browser_helpers import app_worker, configure_training, wait_ms
    back = app_worker(page).evaluate(BACK_AND_REOPEN, "restoreGood")
    reopened = app_worker(page).evaluate(BACK_AND_REOPEN, "resumeSaved")
    configure_training(page, 2, batch_size=64, lr=0.002)
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.epochs.length >= 2 && !window.pytrainApp.training",
                           timeout=wait_ms(300_000))
    return back, reopened, page.evaluate("() => window.pytrainApp.lossPoints()")


def test_the_page_goes_back_and_reopens_its_run_with_the_state_on_the_gpu(big_page_run, page_runs):
    # restoreGood and resumeSaved take the checkpoint the worker holds range by range (no refusal, never whole in the
    # heap): the state stays on the GPU only, and the second epoch after them has the CPU page's losses
    losses, good = big_page_run[1], big_page_run[11]
    back, reopened, points = big_page_run[12]
    _, cpu_losses, _, _, _, _, _, _, _ = page_runs["cpu"]
    n = len(losses)
    assert back["step"] == reopened["step"] == good["step"] == n and back["want"] is None, (back, reopened)
    assert back["onGpu"] and reopened["onGpu"] and back["good"] == reopened["good"] == n
    assert reopened["digest"] == reopened["savedDigest"] == back["digest"]
    _same_losses(points[n:], cpu_losses[n:])


@pytest.fixture(scope="module")
def big_lost_page_run(app_context, site_url):
    return _train_page(app_context, site_url, 2, lose_after=20, choose="on", budget=True)


def test_the_page_resumes_on_a_new_device_when_the_state_on_the_gpu_is_lost(big_lost_page_run, page_runs):
    # the device destroyed after the first epoch's end (16 steps): the worker asks for a new one and the run resumes
    # on it from the epoch's good checkpoint (streamed back, range by range), with the CPU page's losses
    versions, losses, epochs, line, foreign, counts, lost, shown, _, ckpt, on_gpu, good = big_lost_page_run
    _, cpu_losses, cpu_epochs, _, _, _, _, _, _ = page_runs["cpu"]
    assert on_gpu and lost is None and line.startswith("Trains on GPU: "), (line, lost)
    assert counts["renewals"] == 1 and counts["rewound"] == len(cpu_losses) // 2, counts
    _same_losses(losses, cpu_losses)
    assert len(epochs) == 2 and abs(epochs[1]["loss"] - cpu_epochs[1]["loss"]) <= 1e-4 * abs(cpu_epochs[1]["loss"])
    assert good["step"] == len(cpu_losses) and not foreign


def test_the_pages_epoch_keeps_its_streamed_checkpoint_as_the_good_one(big_page_run):
    # the optimizer state on the GPU only: the epoch's end streams the checkpoint into the worker (never whole in the
    # heap), as the run's last good one; the epoch's save and the checkpoint command after it are the same bytes
    import numpy as np

    from pytrain.checkpoint import CheckpointState

    losses, ckpt, good = big_page_run[1], big_page_run[9], big_page_run[11]
    assert good["step"] == len(losses) and json.loads(good["python"])["step"] == len(losses), good["python"]
    assert good["b64"] == ckpt
    state = CheckpointState.load_checkpoint(base64.b64decode(good["b64"]))
    assert state.optimizer_state.step == len(losses)
    assert all(np.any(a != 0) for v in state.optimizer_state.slots.values() for a in v.values())


@pytest.fixture(scope="module")
def limits(gpu_page):
    return json.loads(gpu_page.evaluate("code => window.__py(code)", LIMITS))


def test_a_parameter_past_the_largest_buffer_is_refused_before_any_upload(limits):
    msg, allocated = limits["buffer"]
    # the MLP's first weight, 128 x 784 floats (401408 bytes), past a 200000-byte buffer
    assert "parameter 'fc1.weight' [128, 784]" in msg and "401408 bytes" in msg, msg
    assert "maxStorageBufferBindingSize" in msg and "200000" in msg, msg
    assert allocated == 0


def test_a_model_past_the_gpu_memory_is_refused_naming_it(limits):
    for case in ("memory", "memory_no_estimate"):
        msg, allocated = limits[case]
        assert "does not fit the GPU memory left" in msg and "pytrain assumes" in msg, msg
        assert allocated == 0
    assert "at batch size 16" in limits["memory"][0]   # the step's estimate, activations included
    assert limits["fits"] == "trained"   # the real limits (SwiftShader: 1 GiB buffers) hold the MLP
    assert limits["max_buffer"] >= 2 ** 27 and limits["gpu_memory"] == 2 * 1024 ** 3


def test_a_tensor_past_the_largest_buffer_is_refused_when_allocated(limits):
    assert "a [16, 784] tensor of 50176 bytes" in limits["empty"] and "1000 bytes" in limits["empty"]


def test_the_page_slices_fall_back_to_the_cpu_with_the_reason(limits):
    assert limits["slice"] is None and limits["at"] == [0, 0, 0]
    assert "does not fit the GPU memory left" in limits["slice_refused"]


def test_a_step_past_the_heap_trains_on_the_gpu(limits):
    # the heap's budget below the step's estimate but above the parameters and optimizer state: the CPU refuses it,
    # the GPU trains it (its gradients and activations live there)
    cpu, gpu, refused = limits["heap_between"]
    assert "over pytrain's memory limit" in cpu, cpu
    assert gpu == 1 and refused is None, (gpu, refused)
    # below what the heap keeps even then (the parameters and the largest moment, the optimizer state on the GPU:
    # test_webgpu_big.py): refused, saying what and why
    cpu, gpu, refused = limits["heap_below"]
    assert "over pytrain's memory limit" in cpu, cpu
    assert isinstance(gpu, str) and "keeps its parameters and the largest optimizer moment" in gpu, gpu
    assert "%d bytes" % limits["heap_least"] in gpu, gpu


def test_the_memory_estimate_counts_the_gpu_apart(limits):
    gpu = limits["summary"]
    assert gpu["adapter"] and gpu["total"] == limits["est_total"] and gpu["fits"]
    assert gpu["largest"] == 784 * 128 * 4 and gpu["memory"] == 2 * 1024 ** 3
    assert 0 < gpu["heap"] < gpu["total"] and gpu["heap"] == limits["heap_kept"]
    assert gpu["heap_least"] == limits["heap_least"] < gpu["heap"]


#: the page-side CPU run of the digits MLP both GPU-residency scripts compare with (here and test_webgpu_big.py):
#: 8 batches of 16, ``fresh(ckpt)`` a Module + AdamW at lr 0.01 from the artifacts' (or ``ckpt``'s) state,
#: ``train_cpu(module, opt, upto)`` the losses of the steps from the state's step up to ``upto``
MLP_CPU_RUN = r"""
wasm.install()
arts = digits_artifacts("mlp", "AdamW")
rng = np.random.RandomState(SEED)   # (the including script sets the data's seed)
data = [(rng.rand(16, 784).astype(np.float32), rng.randint(0, 10, 16).astype(np.int64)) for _ in range(8)]

def fresh(ckpt=None):
    state = api.CheckpointState.load_checkpoint(ckpt or arts["checkpoint"])
    module = api.Module(arts["training"], state, arts["eval"])
    opt = api.Optimizer(arts["optimizer"], module)
    opt.set_learning_rate(0.01)
    return module, opt

def train_cpu(module, opt, upto):
    out = []
    for x, y in data[int(module.state.optimizer_state.step):upto]:
        module.lazy_reset_grad()
        outs = module(x, y)
        out.append(float(np.asarray(outs[0] if isinstance(outs, list) else outs)))
        opt.step()
    return out
"""


RESIDENT = r"""
import json, types
import numpy as np
from pytrain.device import api
from pytrain.engine.runtime import InferenceSession
from pytrain.ops import wasm
from pytrain.ops.webgpu import device
from pytrain.webapp.demo import digits_artifacts
from pytrain.webapp.gpu_slices import GpuSlices, Slice

SEED = 2
""" + MLP_CPU_RUN + r"""
probe = rng.rand(5, 784).astype(np.float32)

def exported(module):
    return InferenceSession(module.export_model_for_inferencing(None, ["output"])).run(None, {"input": probe})[0]

def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1e-6, float(np.max(np.abs(b)))))

cpu, cpu_opt = fresh()
cpu_losses = train_cpu(cpu, cpu_opt, 2)
cpu_ckpt_bytes, cpu_out = cpu.state.to_bytes(), exported(cpu)
cpu_losses += train_cpu(cpu, cpu_opt, 8)

module, opt = fresh()
initial = {n: module.state.parameters[n].data.copy() for n in module.parameter_names}
slices, at = GpuSlices(), types.SimpleNamespace(epoch=0, epoch_step=0, step=0)
work = Slice(list(range(8)), lambda i: data[i], 1e9, 2)
before = device().counts()
slices.run(module, opt, at, work)
"""

RESIDENT_SYNC = r"""
out = {"losses": slices.finish(), "stale": slices.stale}
after = device().counts()
out["slice"] = {k: after[k] - before[k] for k in after}   # the two steps: no parameter came back
out["heap_untouched"] = all(np.array_equal(initial[n], module.state.parameters[n].data) for n in initial)
out["sync"] = slices.sync(at)
"""

RESIDENT_COMMIT = r"""
slices.commit()
out["stale_after"] = slices.stale
ck = module.state.to_bytes()
loaded, want = api.CheckpointState.load_checkpoint(ck), api.CheckpointState.load_checkpoint(cpu_ckpt_bytes)
out["ckpt"] = {n: rel(loaded.parameters[n].data, want.parameters[n].data) for n in module.parameter_names}
out["moments"] = {p + "." + s: rel(a, want.optimizer_state.slots[p][s])
                  for p, per in loaded.optimizer_state.slots.items() for s, a in per.items()}
out["ckpt_step"] = loaded.optimizer_state.step
out["export"] = rel(exported(module), cpu_out)
boxes = [(module.state.parameters[n].data, np.empty(t.shape, np.float32)) for n, t in slices.training.params.items()]
for (_, box), t in zip(boxes, slices.training.params.values()):
    t.read_into(box)
"""

RESIDENT_LOST = r"""
out["exact"] = all(np.array_equal(a, b) for a, b in boxes)   # the heap holds the GPU's very bits
out["resident_readbacks"] = slices.readbacks
held = {n: module.state.parameters[n].data.copy() for n in module.parameter_names}
slices.run(module, opt, at, work)   # steps 3, 4 (the heap stays at step 2)
# a run resumed from the checkpoint read back at step 2, on the GPU
resumed = api.Module(arts["training"], api.CheckpointState.load_checkpoint(ck), arts["eval"])
resumed_opt = api.Optimizer(arts["optimizer"], resumed)
resumed_opt.set_learning_rate(0.01)
resumed_slices, resumed_at = GpuSlices(), types.SimpleNamespace(epoch=0, epoch_step=2, step=2)
resumed_slices.run(resumed, resumed_opt, resumed_at, work)
"""

RESIDENT_END = r"""
out["losses"] += slices.finish()
out["resumed"] = resumed_slices.finish()
out["at_before_loss"] = at.step
slices.lost(at, module, "lost in a test")
out["refused"], out["at"] = slices.refused, [at.epoch, at.epoch_step, at.step]
out["opt_step"] = int(module.state.optimizer_state.step)
out["rewound_to_heap"] = all(np.array_equal(held[n], module.state.parameters[n].data) for n in held)
out["cpu_after"] = train_cpu(module, opt, 8)   # the CPU goes on from the last read back
out["cpu"] = cpu_losses
json.dumps(out)
"""


@pytest.fixture(scope="module")
def resident(gpu_page):
    run = lambda code: gpu_page.evaluate("code => window.__py(code)", code)
    for code in (RESIDENT, RESIDENT_SYNC, RESIDENT_COMMIT, RESIDENT_LOST):
        run(code)
        gpu_page.evaluate("window.__settle()")
    return json.loads(run(RESIDENT_END))


def test_the_parameters_stay_on_the_gpu_between_slices(resident):
    # a slice reads back its losses only: the heap keeps the parameters it had, and says they are old
    assert resident["slice"]["readbacks"] == 2 and resident["slice"]["readbackBytes"] == 8, resident["slice"]
    assert resident["stale"] and resident["heap_untouched"] and resident["sync"]
    assert not resident["stale_after"] and resident["resident_readbacks"] == 1


def test_a_read_back_checkpoint_export_and_resume_are_the_cpu_runs(resident):
    assert resident["ckpt_step"] == 2
    for name, err in list(resident["ckpt"].items()) + list(resident["moments"].items()):
        assert err <= 1e-4, (name, err)
    assert len(resident["moments"]) == 2 * len(resident["ckpt"])
    assert resident["export"] <= 1e-4
    assert resident["exact"]
    # resumed from that checkpoint, the GPU goes on with the CPU run's losses
    assert len(resident["resumed"]) == 2
    for c, g in zip(resident["cpu"][2:4], resident["resumed"]):
        assert abs(g - c) <= 1e-5 * abs(c), (c, g)


def test_a_lost_device_rewinds_to_the_last_read_back(resident):
    cpu, gpu = resident["cpu"], resident["losses"]
    assert len(gpu) == 4 and resident["at_before_loss"] == 4
    for c, g in zip(cpu, gpu):
        assert abs(g - c) <= 1e-5 * abs(c), (c, g)
    # steps 3 and 4 were on the GPU only: undone, back to step 2 (read back), and the CPU retrains them
    assert resident["at"] == [0, 2, 2] and resident["opt_step"] == 2 and resident["rewound_to_heap"]
    assert "the CPU trains from step 2" in resident["refused"], resident["refused"]
    for c, g in zip(cpu[2:], resident["cpu_after"]):
        assert abs(g - c) <= 1e-5 * abs(c), (c, g)
    assert len(resident["cpu_after"]) == 6


WIDGET = """async () => {
  const { createTrainer } = await import("./pytrain-widget.js");
  const seen = [];
  const trainer = createTrainer({ data: "digits", gpu: true });
  trainer.on("device", (d) => seen.push(d.mode));
  await trainer.ready;
  const on = trainer.device;
  const auto = await trainer.setGPU("auto");
  const off = await trainer.setGPU(false);
  const back = await trainer.setGPU(true);
  trainer.destroy();
  return { on, auto, off, back, seen };
}"""


def test_the_widget_chooses_and_shows_the_device(app_context, site_url):
    from browser_helpers import Recorder

    with app_context(Recorder()) as ctx:
        page = ctx.new_page()
        page.goto(site_url + "config.json")   # (any page of the site: the widget's module and worker are same-origin)
        got = page.evaluate(WIDGET)
    # gpu: true takes the software adapter; "auto" leaves it (and says why); false turns the GPU off
    assert got["on"]["device"].startswith("GPU: google swiftshader") and got["on"]["mode"] == "on", got
    assert got["auto"]["device"].startswith("CPU, ") and "software" in got["auto"]["reason"], got
    assert got["off"]["device"].startswith("CPU, ") and got["off"]["reason"] == "the GPU is turned off", got
    assert got["back"]["device"].startswith("GPU: ") and got["back"]["reason"] == "", got
    assert got["seen"] == ["auto", "off", "on"], got


# ---- the text models' shaders (web/gpu/shaders_text.js, pytrain/ops/webgpu/text.py and batched.py) --------------

TEXT_OPS = r"""
CASES = []
C2 = OpContext(output_mask=(True, True))

def land(o):   # a kernel's output in a host array (a GPU one once settled; a CPU one as it is)
    if o is None:
        return None
    box = np.full(o.shape, np.nan, np.float32)
    if isinstance(o, np.ndarray):
        box[...] = o
    else:
        o.read_into(box)
    return box

for op in ("Neg", "Exp", "Tanh", "Erf"):
    case(op.lower() + "_odd", op, [f32(5, 7, 9) * 2])
case("tanh_wide", "Tanh", [np.array([-40, -9, -1e-4, 0, 1e-4, 0.5, 9, 40], np.float32)])
case("erf_wide", "Erf", [np.linspace(-5, 5, 1001).astype(np.float32)])
case("pow_cube", "Pow", [f32(7, 13), np.array(3.0, np.float32)])
case("pow_square_int_exponent", "Pow", [f32(7, 13), np.array(2, np.int64)])
case("sum_three_broadcast", "Sum", [f32(4, 1, 5), f32(3, 5), f32(4, 3, 5)])
case("cast_float_to_float", "Cast", [f32(3, 4)], {"to": 1})
# int64 labels to int32: the same buffer (the GPU stores both as int32); a float -> int64 Cast is not routed (the
# plan then refuses it naming the node)
as32 = K.KERNELS[("", "Cast")](OpContext(), dev.upload(labels, keep_host=True), to=6)[0]
assert as32.dtype == np.int32 and as32.host.dtype == np.int32 and (as32.host == labels).all(), as32
assert K.KERNELS[("", "Cast")](OpContext(), dev.upload(f32(3)), to=7) is None
case("cast_like_float", "CastLike", [f32(3, 4), f32(2)])
case("transpose_0213", "Transpose", [f32(3, 5, 2, 7)], {"perm": [0, 2, 1, 3]})
case("transpose_0231", "Transpose", [f32(3, 5, 2, 7)], {"perm": [0, 2, 3, 1]})
case("transpose_default_reverses", "Transpose", [f32(3, 5, 7)])
case("transpose_2d", "Transpose", [f32(33, 17)], {"perm": [1, 0]})
case("unsqueeze_view", "Unsqueeze", [f32(3, 5), np.array([0, -1], np.int64)], cpu=(1,))
case("squeeze_view", "Squeeze", [f32(3, 1, 5, 1), np.array([1], np.int64)], cpu=(1,))
case("concat_middle", "Concat", [f32(2, 3, 5), f32(2, 4, 5), f32(2, 1, 5)], {"axis": 1})
case("concat_last_negative", "Concat", [f32(3, 2), f32(3, 5)], {"axis": -1})
case("split_sizes", "Split", [f32(4, 9, 3), np.array([2, 4, 3], np.int64)], {"axis": 1}, cpu=(1,),
     ctx=OpContext(output_mask=(True,) * 3))
case("split_equal_last", "Split", [f32(2, 6, 12)], {"axis": 2}, ctx=OpContext(output_mask=(True,) * 3))
case("concat_grad", "ConcatGrad", [f32(2, 8, 5), f32(2, 3, 5), f32(2, 5, 5)], {"axis": 1}, domain=PYTRAIN_DOMAIN)
case("split_grad", "SplitGrad", [f32(2, 3, 5), f32(2, 4, 5), f32(2, 3, 5), f32(2, 4, 5)], {"axis": 1},
     domain=PYTRAIN_DOMAIN)
case("matmul_broadcast_batches", "MatMul", [f32(2, 1, 5, 7), f32(3, 7, 4)])
case("matmul_4d_equal", "MatMul", [f32(2, 3, 5, 7), f32(2, 3, 7, 4)])
case("matmul_grad_linear", "MatMulGrad", [f32(3, 5, 4), f32(3, 5, 7), f32(7, 4)], domain=PYTRAIN_DOMAIN)
case("matmul_grad_batched", "MatMulGrad", [f32(2, 3, 5, 4), f32(2, 3, 5, 7), f32(2, 3, 7, 4)], domain=PYTRAIN_DOMAIN)
case("matmul_grad_broadcast", "MatMulGrad", [f32(2, 3, 5, 4), f32(2, 1, 5, 7), f32(3, 7, 4)], domain=PYTRAIN_DOMAIN)
case("matmul_grad_2d", "MatMulGrad", [f32(5, 4), f32(5, 7), f32(7, 4)], domain=PYTRAIN_DOMAIN)
case("gather_axis1_scalar", "Gather", [f32(4, 6, 5), np.array(0, np.int64)], {"axis": 1})
tok = np.array([[1, -1], [6, 0]], np.int64)
case("gather_axis_negative", "Gather", [f32(3, 7, 2), tok], {"axis": -2})
case("gather_grad_axis1_repeats", "GatherGrad", [f32(3, 2, 2, 2), tok, np.zeros((3, 7, 2), np.float32)],
     {"axis": 1}, domain=PYTRAIN_DOMAIN)
tokens = rng.randint(0, 11, (3, 5)).astype(np.int64)
tokens[1, 2] = -100
ce = {"ignore_index": -100, "reduction": "mean"}
case("softmax_ce_tokens", "SoftmaxCrossEntropyLoss", [f32(3, 11, 5) * 3, tokens], ce)
lp3 = get_kernel("SoftmaxCrossEntropyLoss").numpy_fn(C2, f32(3, 11, 5) * 3, tokens, **ce)[1]
case("softmax_ce_grad_tokens", "SoftmaxCrossEntropyLossGrad", [np.array(1.0, np.float32), lp3, tokens], ce,
     domain=PYTRAIN_DOMAIN)
# Dropout: the mask the CPU generator draws (the same seed on both sides), and ratio 0 (no mask drawn)
for name, x, ratio in (("dropout_mask", f32(6, 7, 9), 0.3), ("dropout_ratio_0", f32(5, 3), 0.0)):
    args = [x, np.array(ratio, np.float32), np.array(True)]
    seeded = lambda: OpContext(training=True, rng=np.random.default_rng(7), output_mask=(True, True))
    outs = K.KERNELS[("", "Dropout")](seeded(), dev.upload(x), *args[1:])
    CASES.append((name, "Dropout", "", args, {}, seeded(), outs, [land(o) for o in outs]))
keep = np.random.default_rng(3).random((6, 7, 9)) >= 0.3
case("dropout_grad", "DropoutGrad", [f32(6, 7, 9), keep, np.array(0.3, np.float32)], domain=PYTRAIN_DOMAIN,
     cpu=(1,))
len(CASES)
"""

TEXT_OPS_NAMES = (["neg_odd", "exp_odd", "tanh_odd", "erf_odd", "tanh_wide", "erf_wide", "pow_cube",
                   "pow_square_int_exponent", "sum_three_broadcast", "cast_float_to_float", "cast_like_float",
                   "transpose_0213", "transpose_0231", "transpose_default_reverses", "transpose_2d", "unsqueeze_view",
                   "squeeze_view", "concat_middle", "concat_last_negative", "split_sizes", "split_equal_last",
                   "concat_grad", "split_grad", "matmul_broadcast_batches", "matmul_4d_equal", "matmul_grad_linear",
                   "matmul_grad_batched", "matmul_grad_broadcast", "matmul_grad_2d", "gather_axis1_scalar",
                   "gather_axis_negative", "gather_grad_axis1_repeats", "softmax_ce_tokens", "softmax_ce_grad_tokens",
                   "dropout_mask", "dropout_ratio_0", "dropout_grad"])


@pytest.fixture(scope="module")
def text_op_errors(gpu_page, op_errors):
    return shader_errors(gpu_page, TEXT_OPS)   # (after op_errors: its code defined case() in the page)


@pytest.mark.parametrize("name", TEXT_OPS_NAMES)
def test_text_shader_matches_the_numpy_kernel(text_op_errors, name):
    assert_within_float32(name, text_op_errors[name])


def test_every_text_kernel_case_is_tested(text_op_errors):
    assert sorted(text_op_errors) == sorted(TEXT_OPS_NAMES)


def _tiny_text_artifacts(kind: str) -> dict:
    """A tiny BERT classifier (dropout 0.1: the CPU generator's masks) or a tiny GPT-2 fine-tuned with LoRA
    (dropout 0), from Hugging Face configs, exported as the bench's workloads are; pytrain's AdamW artifacts."""
    import torch
    from torch_zoo import stub_torchvision_ops

    stub_torchvision_ops()   # transformers imports torchvision, whose compiled ops this torch may lack
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

    from pytrain.engine.lora import LoRA
    from pytrain.generator import artifacts as gen
    from pytrain.generator.torch_export import torch_export

    torch.manual_seed(0)
    if kind == "bert":
        cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.1,
                         attention_probs_dropout_prob=0.1, num_labels=10, attn_implementation="eager")
        hf, shape, lora = BertForSequenceClassification(cfg), (4, 8), None
        wrap = lambda ids: hf(input_ids=ids).logits  # noqa: E731
    else:
        cfg = GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=8, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
        hf, shape, lora = GPT2LMHeadModel(cfg), (2, 8), LoRA(rank=4, alpha=8, targets=["c_attn"])
        wrap = lambda ids: hf(input_ids=ids).logits.transpose(1, 2)  # noqa: E731

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return wrap(ids)

    ids = torch.randint(0, 50, shape)
    onnx_bytes = torch_export(Wrapped().train(), (ids,), input_names=["input"], output_names=["logits"], opset=17,
                              dynamic_batch=False)
    arts = gen.generate_artifacts(onnx_bytes, loss=gen.LossType.CrossEntropyLoss, optimizer=gen.OptimType.AdamW,
                                  lora=lora)
    return {"arts": {"training": arts.training_model, "eval": arts.eval_model, "optimizer": arts.optimizer_model,
                     "checkpoint": arts.checkpoint}, "shape": shape}


TEXT_BATCHES = "batches = [(sample(), rng.randint(0, 10, SHAPE[0]).astype(np.int64)) for _ in range(2)] * 10"


@pytest.fixture(scope="module", params=["bert", "gpt2_lora"])
def text_run(gpu_page, request):
    # 20 AdamW steps of the tiny model on the GPU against the same steps on the page's CPU (wasm kernels)

    made = _tiny_text_artifacts(request.param)
    pre = artifacts_setup(made["arts"])
    pre += "KIND, SHAPE, OPTIMIZER, VOCAB = 'given', %r, 'AdamW', 50\n" % (made["shape"],)
    labels = "np.roll(x, -1, axis=1)" if request.param == "gpt2_lora" else \
        "rng.randint(0, 10, SHAPE[0]).astype(np.int64)"
    pre += "def pair():\n    x = sample()\n    return x, %s\n" % labels
    assert TEXT_BATCHES in MLP
    out = train_on_page(gpu_page, pre, MLP.replace(TEXT_BATCHES, "batches = [pair() for _ in range(2)] * 10"))
    out["kind"] = request.param
    return out


def test_the_text_models_train_on_the_gpu_with_the_cpu_losses(text_run):
    cpu, gpu = text_run["cpu"], text_run["gpu"]
    assert len(gpu) == len(cpu) == 20
    for step, (c, g) in enumerate(zip(cpu, gpu)):
        assert abs(g - c) <= 1e-5 * abs(c), (text_run["kind"], step, c, g)
    assert cpu[-1] < cpu[0]   # it learns
    assert text_run["step"] == 20
    for name, err in text_run["params"].items():
        # (an attention key's bias has a true gradient of 0, softmax being blind to a row's shift: its gradient
        # is rounding noise on either device, which Adam's normalised step turns into +-lr, so it is not compared)
        assert err <= 1e-4 or name.endswith("key.bias"), (name, err)
    # every node ran on the GPU: per step the batch, its labels and the constants computed on the CPU go up (and
    # BERT's Dropout masks), the loss comes down
    counts = text_run["counts"]
    assert counts["readbacks"] <= 20 + 3 * len(text_run["params"]), counts
    if text_run["kind"] == "gpt2_lora":   # after the first step only the batch and its labels (the causal mask,
        assert text_run["later_uploads"] == 2 * 19, text_run   # positions and scalars stay on the GPU)
    print("%s: losses %s, counts %s" % (text_run["kind"], gpu[:3], counts))
