"""The native fast paths (MobileNetV2 and BERT rows) against the plain formulas they
replace, onnx.reference and onnxruntime:

* Clip through np.clip where it equals maximum-then-minimum (NaN and inf inputs, NaN bounds, min > max);
* erf for float32/float16 as one rational function in float64 (edge cases, a dense grid, float16);
* Conv: 1x1 as a per-sample product, depthwise as shifted planes, large ungrouped convs with a
  per-sample im2col, and the one-copy padding for im2col;
* the plan-time fusion Conv [-> BatchNormalization (inference)] [-> Clip | Relu | HardSwish | HardSigmoid]
  (pytrain/engine/fusion.py), against
  onnxruntime, and the cases where it must not happen (BN trains, a second reader, training mode).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ops_oracle import check
from pytrain.generator import artifacts
from pytrain.engine import fusion
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.ops import OpContext, backend, get_kernel, windows
from pytrain.ops.elementwise import op_clip
from pytrain.ops.nn import op_conv
from pytrain.ops.special import erf, erf_single
from pytrain.engine.runtime import InferenceSession

RNG = np.random.default_rng(14)


def _run(op, *inputs, **attrs):
    return get_kernel(op).fn(OpContext(), *inputs, **attrs)[0]


# --- Clip -------------------------------------------------------------------------------------

SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -1.5, 0.25, 7.0, 6.0, -3.0e38, 3.0e38], dtype=np.float32)


def _clip_formula(x, lo, hi):
    y = x
    if lo is not None:
        y = np.maximum(y, lo)
    if hi is not None:
        y = np.minimum(y, hi)
    return np.asarray(y, dtype=x.dtype)


@pytest.mark.parametrize("lo, hi", [(0.0, 6.0), (-1.0, 1.0), (6.0, 0.0), (2.0, 2.0), (0.0, None), (None, 6.0),
                                    (None, None), (np.nan, 6.0), (0.0, np.nan), (-np.inf, np.inf)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_matches_maximum_then_minimum(lo, hi, dtype):
    x = np.concatenate([SPECIALS, RNG.standard_normal(199).astype(np.float32) * 5]).astype(dtype).reshape(3, -1)
    bounds = [None if v is None else np.array(v, dtype=dtype) for v in (lo, hi)]
    got = _run("Clip", x, *bounds)
    want = _clip_formula(x, *[None if b is None else b[()] for b in bounds])
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, want)  # NaN where NaN; -0.0 == 0.0
    assert got is not x


def test_clip_fast_path_is_taken_here_and_input_untouched():
    assert op_clip._FAST_CLIP  # numpy >= 2 and numpy 1.17 both qualify
    x = SPECIALS.copy()
    _run("Clip", x, np.array(0.0, np.float32), np.array(6.0, np.float32))
    np.testing.assert_array_equal(x, SPECIALS)


def test_clip_against_onnx_reference():
    x = RNG.standard_normal((4, 5)).astype(np.float32) * 4
    check("Clip", [x, np.array(0, np.float32), np.array(6, np.float32)])
    check("Clip", [x, np.array(2, np.float32), np.array(-1, np.float32)])
    check("Clip", [(x * 3).astype(np.int64), np.array(-2, np.int64), np.array(5, np.int64)])
    check("Clip", [x, None, np.array(1, np.float32)])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "odd"])
def test_relu_as_a_clip_equals_maximum(dtype, layout):
    x = np.concatenate([SPECIALS, -SPECIALS, RNG.standard_normal(101).astype(np.float32)]).astype(dtype)
    x = {"contiguous": x.reshape(1, -1), "strided": np.stack([x, x[::-1]], axis=1)[::2],
         "odd": x[:119].reshape(7, 17)}[layout]
    got = _run("Relu", x)
    want = np.maximum(x, dtype(0))
    assert got.dtype == x.dtype and got.shape == x.shape and got is not x
    np.testing.assert_array_equal(got, want)  # NaN where NaN (its sign kept); -0.0 == 0.0
    np.testing.assert_array_equal(np.signbit(got[np.isnan(got)]), np.signbit(want[np.isnan(want)]))
    check("Relu", [x])


def test_clip_into_in_place():
    x = np.array([-2.0, np.nan, 3.0, 9.0], dtype=np.float32)
    y = op_clip.clip_into(x, x, np.float32(0), np.float32(6))
    assert y is x
    np.testing.assert_array_equal(x, [0.0, np.nan, 3.0, 6.0])


# --- erf ------------------------------------------------------------------------------------------

def _math_erf(x):
    return np.array([math.erf(float(v)) for v in np.ravel(x)]).reshape(np.shape(x))


def test_erf_single_edge_cases():
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-45, -1e-40, 1e-8, np.inf, -np.inf, np.nan, 3.9, 4.0, 4.0001,
                  10.0, -1e30, 3.4e38], dtype=np.float32)
    y = erf(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    assert y[0] == 0 and not np.signbit(y[0]) and y[1] == 0 and np.signbit(y[1])
    # tiny x: 2/sqrt(pi) * x to float32 precision (relative, not just absolute)
    tiny = x[[2, 3, 6]].astype(np.float64)
    np.testing.assert_allclose(y[[2, 3, 6]], 2 / math.sqrt(math.pi) * tiny, rtol=3e-7)
    assert y[4] >= 0 and y[5] <= 0  # denormals keep their sign
    assert y[7] == 1 and y[8] == -1 and np.isnan(y[9])
    assert list(y[10:]) == [1, 1, 1, 1, -1, 1]  # float32 rounds erf to exactly 1 from ~3.9 on


def test_erf_single_within_1e7_of_math_erf():
    # a dense grid over the whole fitted range (the offline check covered every float32 in [0, 4.5])
    x = np.concatenate([np.linspace(-4.5, 4.5, 90001), RNG.standard_normal(20000) * 2,
                        np.linspace(3.7, 4.1, 4001)]).astype(np.float32)
    err = np.abs(erf(x).astype(np.float64) - _math_erf(x))
    assert err.max() <= 1e-7, (err.max(), x[err.argmax()])


def test_erf_single_is_odd_and_shape_preserving():
    x = (RNG.standard_normal((3, 4, 5)) * 3).astype(np.float32)
    np.testing.assert_array_equal(erf(-x), -erf(x))
    x_strided = x[:, ::2, 1:]
    np.testing.assert_array_equal(erf(x_strided), erf(np.ascontiguousarray(x_strided)))
    assert erf(np.float32(0.5)).shape == ()
    assert erf(np.zeros((0, 3), np.float32)).shape == (0, 3)
    big = (RNG.standard_normal(100003) * 2).astype(np.float32)  # several chunks plus a partial one
    np.testing.assert_array_equal(erf_single(big), np.concatenate([erf_single(big[:50000]), erf_single(big[50000:])]))


def test_erf_float16_and_float64_paths():
    x16 = np.linspace(-5, 5, 2001).astype(np.float16)
    y16 = erf(x16)
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.astype(np.float64), _math_erf(x16), rtol=0, atol=1e-3)
    x64 = np.linspace(-6, 6, 2001)
    np.testing.assert_allclose(erf(x64), _math_erf(x64), rtol=0, atol=3e-15)  # untouched float64 path


def test_erf_op_against_onnx_reference():
    x = (RNG.standard_normal((4, 50)) * 2).astype(np.float32)
    check("Erf", [x], rtol=0, atol=1e-7)


# --- Conv fast paths --------------------------------------------------------------------------------

@pytest.fixture
def small_thresholds(monkeypatch):
    """Every Conv below takes a fast path whatever its size."""
    monkeypatch.setattr(op_conv, "_POINTWISE_MIN_POSITIONS", 1)
    monkeypatch.setattr(op_conv, "_DEPTHWISE_MIN_POSITIONS", 1)
    monkeypatch.setattr(op_conv, "_PER_SAMPLE_MIN_POSITIONS", 1)


def _im2col_conv(X, W, B=None, **attrs):
    """The batch-folded im2col path: with a product backend set, Conv takes no fast path."""
    previous = backend.use("matmul", lambda a, b: np.matmul(a, b))
    try:
        return _run("Conv", X, W, B, **attrs)
    finally:
        backend.use("matmul", previous)


CONV_CASES = [
    # (X shape, W shape, attributes): depthwise
    ((2, 5, 11, 13), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1])),
    ((2, 5, 17, 15), (5, 1, 3, 3), dict(group=5, pads=[1, 0, 2, 1], strides=[2, 3])),
    ((2, 4, 20, 19), (4, 1, 5, 3), dict(group=4, pads=[2, 1, 0, 2], strides=[2, 2], dilations=[2, 3])),
    ((3, 4, 16, 16), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_UPPER", strides=[3, 3])),
    ((3, 4, 15, 16), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_LOWER", strides=[2, 2])),
    ((3, 4, 15, 16), (4, 1, 2, 2), dict(group=4, auto_pad="VALID", strides=[2, 1])),
    ((1, 3, 9, 9), (3, 1, 3, 3), dict(group=3, pads=[4, 4, 4, 4], strides=[2, 2])),  # more pad than input
    # pointwise
    ((2, 6, 7, 8), (9, 6, 1, 1), dict()),
    ((2, 6, 7), (9, 6, 1), dict()),
    # ungrouped, per-sample im2col
    ((2, 3, 12, 12), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((2, 4, 13, 11), (5, 4, 5, 3), dict(pads=[2, 1, 0, 2], strides=[2, 2], dilations=[2, 1])),
    ((3, 4, 30), (5, 4, 3), dict(auto_pad="SAME_UPPER", strides=[3])),
    ((2, 3, 6, 7, 8), (4, 3, 3, 2, 3), dict(auto_pad="SAME_LOWER", strides=[2, 1, 2])),
    # grouped but not depthwise, and a depthwise multiplier of 2: the im2col path still
    ((2, 4, 9, 9), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    ((2, 3, 9, 9), (6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_fast_paths_against_im2col_and_reference(small_thresholds, xs, ws, attrs, bias):
    X = RNG.standard_normal(xs).astype(np.float32)
    W = RNG.standard_normal(ws).astype(np.float32)
    B = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    got = _run("Conv", X, W, B, **attrs)
    want = _im2col_conv(X, W, B, **attrs)
    assert got.shape == want.shape and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    check("Conv", [X, W] + ([B] if bias else []), attrs, rtol=1e-4, atol=1e-5)


def test_depthwise_float64_and_real_thresholds():
    X = RNG.standard_normal((2, 3, 20, 20))
    W = RNG.standard_normal((3, 1, 3, 3))
    got = _run("Conv", X, W, group=3, pads=[1, 1, 1, 1])  # 400 positions: the depthwise path
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _im2col_conv(X, W, group=3, pads=[1, 1, 1, 1]), rtol=1e-12, atol=1e-12)


def test_depthwise_nonfinite_inputs_stay_where_they_were():
    X = RNG.standard_normal((1, 2, 20, 20)).astype(np.float32)
    X[0, 0, 5, 5] = np.nan
    X[0, 1, 10, 10] = np.inf
    W = np.ones((2, 1, 3, 3), np.float32)
    got = _run("Conv", X, W, group=2, pads=[1, 1, 1, 1])
    want = _im2col_conv(X, W, group=2, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isnan(got[0, 0, 4:7, 4:7]).all() and not np.isnan(got[0, 0, 8:, :]).any()


@pytest.mark.parametrize("shape, pads", [((2, 3, 5, 6), [1, 2, 0, 1]), ((16, 96, 12, 12), [1, 1, 1, 1]),
                                         ((2, 3, 7), [2, 1])])
def test_padded_batch_last_is_pad_then_transpose(shape, pads):
    x = RNG.standard_normal(shape).astype(np.float32)
    rank = len(shape) - 2
    win = windows.geometry("Conv", shape, [3] * rank, None, None, pads)
    np.testing.assert_array_equal(windows.padded_batch_last(x, win),
                                  windows.batch_last(windows.pad_spatial(x, win)))


# --- Conv -> BatchNormalization -> Clip fusion ----------------------------------------------------

def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _bn_params(prefix, c):
    return [_init(prefix + "_s", RNG.uniform(0.5, 1.5, c).astype(np.float32)),
            _init(prefix + "_b", RNG.uniform(-0.3, 0.3, c).astype(np.float32)),
            _init(prefix + "_m", RNG.uniform(-0.5, 0.5, c).astype(np.float32)),
            _init(prefix + "_v", RNG.uniform(0.5, 2.0, c).astype(np.float32))]


def _block_model(conv_bias=False, clip=True, extra_reader=None, bn_attrs=None, clip_bounds=(0.0, 6.0),
                 bn_output_is_graph_output=False):
    """X -> Conv(3x3, 8) -> BN -> Clip -> depthwise Conv -> BN -> Clip -> Y (+ optional extra outputs)."""
    nodes, inits = [], []
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.5
    w2 = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.5
    inits += [_init("w1", w1), _init("w2", w2)] + _bn_params("bn1", 8) + _bn_params("bn2", 8)
    inputs1 = ["X", "w1"]
    if conv_bias:
        inits.append(_init("cb1", RNG.standard_normal(8).astype(np.float32)))
        inputs1.append("cb1")
    inits += [_init("lo", np.array(clip_bounds[0], np.float32)), _init("hi", np.array(clip_bounds[1], np.float32))]
    bn_kw = dict(epsilon=1e-3, **(bn_attrs or {}))
    nodes.append(helper.make_node("Conv", inputs1, ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"],
                                  name="bn1", **bn_kw))
    last = "n1"
    if clip:
        nodes.append(helper.make_node("Clip", ["n1", "lo", "hi"], ["r1"], name="clip1"))
        last = "r1"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["c2"], name="conv2", group=8, pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"],
                                  name="bn2", epsilon=1e-5))
    nodes.append(helper.make_node("Clip", ["n2", "lo", "hi"], ["Y"], name="clip2"))
    outputs = [_value("Y", None)]
    if extra_reader == "node":
        nodes.append(helper.make_node("Relu", ["c1"], ["side"], name="side"))
        outputs.append(_value("side", None))
    elif extra_reader == "output":
        outputs.append(_value("c1", None))
    if bn_output_is_graph_output:
        outputs.append(_value("n1", None))
    graph = helper.make_graph(nodes, "block", [_value("X", ["N", 3, 32, 32])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model, x):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no fusion on its side
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": x})


def _pytrain(model, x, fuse=True, monkeypatch=None):
    if not fuse:
        monkeypatch.setattr(fusion, "fuse", lambda nodes, outputs: nodes)
    sess = InferenceSession(model.SerializeToString())
    out = sess.run(None, {"X": x})
    ops = [s[6].op_type for plan in sess._plans.values() for s in plan._steps]
    return out, ops


@pytest.mark.parametrize("conv_bias", [False, True])
@pytest.mark.parametrize("clip_bounds", [(0.0, 6.0), (-0.5, 0.5), (1.0, -1.0)])
def test_fusion_conv_bn_clip_against_onnxruntime(conv_bias, clip_bounds):
    model = _block_model(conv_bias=conv_bias, clip_bounds=clip_bounds)
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32) * 2
    got, ops = _pytrain(model, x)
    assert ops == ["FusedConv", "FusedConv"]
    want = _ort(model, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_fusion_matches_the_unfused_plan(monkeypatch):
    model = _block_model(conv_bias=True)
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32) * 2
    fused, ops = _pytrain(model, x)
    assert "FusedConv" in ops
    plain, ops = _pytrain(model, x, fuse=False, monkeypatch=monkeypatch)
    assert "FusedConv" not in ops and "BatchNormalization" in ops
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-5, atol=2e-6)  # float32 rounding apart


def test_fusion_nan_and_inf_inputs(monkeypatch):
    model = _block_model()
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    x[0, 0, 3, 3] = np.nan
    x[1, 2, 10, 10] = np.inf
    fused, _ = _pytrain(model, x)
    plain, _ = _pytrain(model, x, fuse=False, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(np.isnan(fused[0]), np.isnan(plain[0]))
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-5, atol=2e-6)


def test_fusion_without_clip_when_bn_output_is_read_elsewhere():
    model = _block_model(bn_output_is_graph_output=True)
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    got, ops = _pytrain(model, x)
    assert ops.count("FusedConv") == 2 and ops.count("Clip") == 1  # conv1+bn1 fused, clip1 kept
    for g, w in zip(got, _ort(model, x)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("extra_reader", ["node", "output"])
def test_no_fusion_when_the_conv_output_has_another_reader(extra_reader):
    model = _block_model(extra_reader=extra_reader)
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    got, ops = _pytrain(model, x)
    assert ops[:3] == ["Conv", "BatchNormalization", "Clip"] and ops.count("FusedConv") == 1
    for g, w in zip(got, _ort(model, x)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_no_fusion_in_training_mode():
    model = _block_model(bn_attrs={"training_mode": 1})
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    _, ops = _pytrain(model, x)
    assert ops[:3] == ["Conv", "BatchNormalization", "Clip"] and ops.count("FusedConv") == 1


def _classifier_model():
    """The block, then GlobalAveragePool -> Flatten -> Gemm: a trainable head."""
    m = _block_model(conv_bias=True)
    g = m.graph
    g.output.pop()
    g.node.extend([helper.make_node("GlobalAveragePool", ["Y"], ["pooled"]),
                   helper.make_node("Flatten", ["pooled"], ["flat"]),
                   helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)])
    g.initializer.extend([_init("fc_w", RNG.standard_normal((4, 8)).astype(np.float32) * 0.3),
                          _init("fc_b", np.zeros(4, np.float32))])
    g.output.extend([_value("logits", ["N", 4])])
    return m


def _train(model, requires_grad, monkeypatch, fuse):
    if not fuse:
        monkeypatch.setattr(fusion, "fuse", lambda nodes, outputs: nodes)
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=requires_grad,
                                        loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.SGD(momentum=0.9), batchnorm="eval")
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.1)
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(3):
        x = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
        y = rng.integers(0, 4, 4).astype(np.int64)
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()
    ops = [s[6].op_type for s in module._train_plan._steps]
    return losses, ops, {k: p.data.copy() for k, p in state.parameters.items()}


def test_fusion_in_training_frozen_backbone_and_bn_that_trains(monkeypatch):
    model = _classifier_model()
    # frozen backbone: only the head trains, both chains fuse, training is unchanged
    losses, ops, params = _train(model, ["fc_w", "fc_b"], monkeypatch, fuse=True)
    assert ops.count("FusedConv") == 2 and "BatchNormalization" not in ops
    # the first BatchNormalization's scale and bias train: its gradient reads conv1's output, and
    # the gradient flowing back to it reads the second chain's tensors too: nothing fuses
    losses_bn, ops_bn, params_bn = _train(model, ["fc_w", "fc_b", "bn1_s", "bn1_b"], monkeypatch, fuse=True)
    assert ops_bn.count("FusedConv") == 0 and ops_bn.count("BatchNormalization") == 2
    with monkeypatch.context() as m:
        plain_losses, plain_ops, plain_params = _train(model, ["fc_w", "fc_b"], m, fuse=False)
        plain_bn, _, plain_params_bn = _train(model, ["fc_w", "fc_b", "bn1_s", "bn1_b"], m, fuse=False)
    assert "FusedConv" not in plain_ops
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5)
    np.testing.assert_allclose(losses_bn, plain_bn, rtol=1e-5)
    for k in plain_params:
        np.testing.assert_allclose(params[k], plain_params[k], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(params_bn[k], plain_params_bn[k], rtol=1e-4, atol=1e-6)


def test_fused_kernel_refuses_bad_parameters():
    from pytrain.errors import InputError

    X = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    W = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    ok = [np.ones(3, np.float32)] * 4
    fused = get_kernel("FusedConv", "ai.pytrain").fn
    with pytest.raises(InputError, match="BatchNormalization: input scale must have shape"):
        fused(OpContext(), X, W, None, np.ones(2, np.float32), *ok[1:])
    with pytest.raises(InputError, match="bias B must have shape"):
        fused(OpContext(), X, W, np.ones(2, np.float32), *ok)
    y = fused(OpContext(), X, W, None, *ok, np.array(0, np.float32), None, clip=1)[0]
    a = 1 / np.sqrt(1 + 1e-5)  # scale = bias = mean = var = 1
    np.testing.assert_allclose(y, np.maximum(_run("Conv", X, W) * a + (1 - a), 0), rtol=1e-5, atol=1e-6)


# --- 1x1 convs over few positions, activations fused into Conv (MobileNetV3's squeeze-excite) -----

@pytest.mark.parametrize("xs, ws", [((3, 5, 1, 1), (4, 5, 1, 1)), ((2, 6, 2, 3), (9, 6, 1, 1)),
                                    ((1, 7, 3), (2, 7, 1)), ((4, 3, 1, 1, 1), (5, 3, 1, 1, 1))])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pointwise_over_few_positions(xs, ws, bias, dtype):
    X = RNG.standard_normal(xs).astype(dtype)
    W = RNG.standard_normal(ws).astype(dtype)
    B = RNG.standard_normal(ws[0]).astype(dtype) if bias else None
    got = _run("Conv", X, W, B)  # below _POINTWISE_MIN_POSITIONS: the folded product
    assert got.dtype == dtype and got.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, _im2col_conv(X, W, B), rtol=tol, atol=tol)
    if dtype == np.float32:
        check("Conv", [X, W] + ([B] if bias else []), {}, rtol=1e-4, atol=1e-5)


def _act_model(chain, conv_attrs=None, act_attrs=None, extra_reader=False):
    """X -> Conv(4 -> 6, bias) [-> BN] -> activation -> Y: squeeze-excite's and MobileNetV3's chains."""
    group = (conv_attrs or {}).get("group", 1)
    inits = [_init("w", RNG.standard_normal((6, 4 // group, 3, 3)).astype(np.float32) * 0.4),
             _init("cb", RNG.standard_normal(6).astype(np.float32))] + _bn_params("bn", 6)
    nodes = [helper.make_node("Conv", ["X", "w", "cb"], ["c"], name="conv", **(conv_attrs or {}))]
    last = "c"
    for op in chain:
        if op == "BatchNormalization":
            nodes.append(helper.make_node(op, [last, "bn_s", "bn_b", "bn_m", "bn_v"], ["n"], name="bn"))
            last = "n"
        else:
            nodes.append(helper.make_node(op, [last], ["Y"], name="act", **(act_attrs or {})))
            last = "Y"
    outputs = [_value(last, None)] + ([_value("c", None)] if extra_reader else [])
    graph = helper.make_graph(nodes, "act", [_value("X", ["N", 4, 9, 11])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


ACT_CHAINS = [(["Relu"], None), (["HardSwish"], None), (["HardSigmoid"], {"alpha": 1 / 6, "beta": 0.5}),
              (["HardSigmoid"], None), (["BatchNormalization", "HardSwish"], None),
              (["BatchNormalization", "Relu"], None)]


@pytest.mark.parametrize("chain, act_attrs", ACT_CHAINS, ids=["+".join(c[0]) + str(i) for i, c in enumerate(ACT_CHAINS)])
@pytest.mark.parametrize("conv_attrs", [{}, {"pads": [1, 0, 2, 1], "strides": [2, 1]}, {"group": 2, "dilations": [2, 1]}])
def test_fused_activation_against_onnxruntime_and_unfused(monkeypatch, chain, act_attrs, conv_attrs):
    model = _act_model(chain, conv_attrs, act_attrs)
    x = RNG.standard_normal((2, 4, 9, 11)).astype(np.float32) * 3
    x[0, 0, 2, 2], x[1, 1, 4, 4], x[1, 3, 0, 0] = np.nan, np.inf, -np.inf
    got, ops = _pytrain(model, x)
    assert ops == ["FusedConv"]
    np.testing.assert_allclose(got[0], _ort(model, x)[0], rtol=1e-5, atol=1e-5)
    plain, ops = _pytrain(model, x, fuse=False, monkeypatch=monkeypatch)
    assert "FusedConv" not in ops
    if "BatchNormalization" not in chain:  # the same float operations: equal bit for bit
        np.testing.assert_array_equal(got[0], plain[0])
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-5, atol=2e-6)


def test_no_activation_fusion_when_the_conv_output_is_read_elsewhere():
    model = _act_model(["HardSwish"], extra_reader=True)
    x = RNG.standard_normal((2, 4, 9, 11)).astype(np.float32)
    got, ops = _pytrain(model, x)
    assert ops == ["Conv", "HardSwish"]
    for g, w in zip(got, _ort(model, x)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_fused_kernel_refuses_an_unknown_activation_and_partial_normalisation():
    from pytrain.errors import InputError

    X = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    W = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    fused = get_kernel("FusedConv", "ai.pytrain").fn
    with pytest.raises(InputError, match="no in-place form of activation 'Elu'"):
        fused(OpContext(), X, W, None, activation="Elu")
    with pytest.raises(InputError, match="needs scale, bias, mean and var"):
        fused(OpContext(), X, W, None, np.ones(3, np.float32))
