"""The CNN inference fast paths of issue 32 against onnxruntime and torch: the depthwise Conv as one
BLAS product per channel over its taps' columns (pytrain/ops/windows.py depthwise_conv2d: strides,
dilations, uneven pads, bias, channel chunks, NaN/inf staying in their windows), GlobalAveragePool as
one einsum row sum (1-D/2-D/3-D, float64, NaN/inf rows, a sample's value independent of its batch),
Resize's plans kept by value, MaxPool one axis at a time, squeeze-excite's single-position 1x1 Conv
as one product, an InferenceSession's constant weights folded once per node
(OpContext.constant_memo) while a Module's writable ones are not, and Conv's plans (window, native form,
dense operators) kept per input shape beside those weights, every form against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from ops_oracle import check
from pytrain.engine.runtime import InferenceSession
from pytrain.ops import OpContext, get_kernel, windows
from pytrain.ops.nn.op_conv import conv_window
from pytrain.ops.registry import PYTRAIN_DOMAIN

RNG = np.random.default_rng(32)

DEPTHWISE = [
    # (X shape, kernel, attributes): MobileNetV3's mid-size maps, then the corners
    ((2, 8, 24, 30), (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((2, 5, 6, 24), (3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 6, 6, 24), (5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2])),
    ((1, 3, 11, 13), (3, 2), dict(pads=[2, 1, 0, 2], strides=[1, 2], dilations=[2, 3])),
    ((3, 4, 9, 10), (3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 3])),
    ((2, 3, 9, 9), (1, 1), dict(strides=[2, 2])),
]


def _depthwise(xs, ks, attrs, dtype=np.float32):
    X = RNG.standard_normal(xs).astype(dtype)
    W = RNG.standard_normal((xs[1], 1) + ks).astype(dtype)
    B = RNG.standard_normal(xs[1]).astype(dtype)
    attrs = dict(attrs, group=xs[1])
    win = conv_window(X, W, B, xs[1], None, attrs.get("strides"), attrs.get("dilations"), attrs.get("pads"),
                      "NOTSET")
    return X, W, B, attrs, win


@pytest.mark.parametrize("chunk", [1 << 19, 1], ids=["whole", "per-channel"])
@pytest.mark.parametrize("case", range(len(DEPTHWISE)))
def test_depthwise_columns_against_onnxruntime(monkeypatch, case, chunk):
    monkeypatch.setattr(windows, "_DEPTHWISE_CHUNK", chunk)
    X, W, B, attrs, win = _depthwise(*DEPTHWISE[case])
    y = windows.depthwise_conv2d(X, W, win, B)
    want, = check("Conv", [X, W, B], attrs, oracle="ort", rtol=1e-4, atol=1e-5)
    assert y.flags.c_contiguous and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_depthwise_columns_float64_against_torch():
    X, W, B, attrs, win = _depthwise(*DEPTHWISE[3], dtype=np.float64)
    y = windows.depthwise_conv2d(X, W, win, B)
    xp = torch.nn.functional.pad(torch.tensor(X), [1, 2, 2, 0])
    want = torch.nn.functional.conv2d(xp, torch.tensor(W), torch.tensor(B), stride=(1, 2), dilation=(2, 3),
                                      groups=X.shape[1]).numpy()
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_depthwise_columns_keep_nonfinite_values_in_their_windows(bad):
    X = RNG.standard_normal((2, 4, 8, 10)).astype(np.float32)
    X[1, 2, 3, 4] = bad
    X[0, 0, 7, 9] = bad  # the last position: the grid's tail and the next channel must not see it
    W = np.abs(RNG.standard_normal((4, 1, 3, 3))).astype(np.float32) + 0.1
    attrs = dict(group=4, pads=[1, 1, 1, 1])
    win = conv_window(X, W, None, 4, None, None, None, attrs["pads"], "NOTSET")
    y = windows.depthwise_conv2d(X, W, win)
    want = torch.nn.functional.conv2d(torch.tensor(X), torch.tensor(W), padding=1, groups=4).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    assert (~np.isfinite(y)).sum() == 9 + 4
    fine = np.isfinite(want)
    np.testing.assert_allclose(y[fine], want[fine], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("xs", [(8, 288, 2, 6), (2, 3, 5), (2, 3, 2, 3, 4), (1, 1, 1, 1), (3, 5, 7, 9)])
def test_global_average_pool_against_onnxruntime(xs):
    X = RNG.standard_normal(xs).astype(np.float32)
    check("GlobalAveragePool", [X], {}, oracle="ort", rtol=1e-5, atol=1e-6)
    check("GlobalAveragePool", [X.astype(np.float64)], {}, rtol=1e-12, atol=1e-12)


def test_global_average_pool_nonfinite_rows():
    X = RNG.standard_normal((2, 4, 3, 5)).astype(np.float32)
    X[0, 1, 2, 3] = np.nan
    X[1, 2, 0, 0] = np.inf
    X[1, 3, 0, 0], X[1, 3, 1, 1] = np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        got, = check("GlobalAveragePool", [X], {}, oracle="ort")
    assert np.isnan(got[0, 1, 0, 0]) and got[1, 2, 0, 0] == np.inf and np.isnan(got[1, 3, 0, 0])
    assert np.isfinite(np.delete(got.reshape(8), [1, 6, 7])).all()


@pytest.mark.parametrize("xs", [(8, 288, 2, 6), (8, 30, 3, 12), (5, 3, 7, 7)])
def test_global_average_pool_of_a_sample_does_not_depend_on_its_batch(xs):
    # the feature head caches a sample's pooled features by its bytes (pytrain/webapp/feature_head.py):
    # the same sample must pool to the same values alone, in any batch and at any address
    pool = get_kernel("GlobalAveragePool").fn
    X = RNG.standard_normal(xs).astype(np.float32)
    batch, = pool(OpContext(), X)
    buf = np.empty(X.size + 3, np.float32)
    shifted = buf[3:].reshape(X.shape)
    shifted[...] = X
    np.testing.assert_array_equal(pool(OpContext(), shifted)[0], batch)
    for n in range(xs[0]):
        np.testing.assert_array_equal(pool(OpContext(), X[n:n + 1].copy())[0], batch[n:n + 1])


def _conv_bn_hardswish(c: int, m: int, k: int, group: int) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> HardSwish -> Conv (depthwise) -> BatchNormalization -> Relu, all
    weights initializers (what FusedConv folds)."""
    inits, nodes = [], []
    x = "x"
    for i, (cin, cout, g, act) in enumerate([(c, m, group, "HardSwish"), (m, m, m, "Relu")]):
        w = RNG.standard_normal((cout, cin // g, k, k)).astype(np.float32) * 0.3
        bn = [RNG.random(cout).astype(np.float32) + 0.5, RNG.standard_normal(cout).astype(np.float32),
              RNG.standard_normal(cout).astype(np.float32) * 0.1, RNG.random(cout).astype(np.float32) + 0.5]
        names = ["w%d" % i] + ["bn%d_%d" % (i, j) for j in range(4)]
        inits += [numpy_helper.from_array(a, n) for a, n in zip([w] + bn, names)]
        nodes += [helper.make_node("Conv", [x, names[0]], ["c%d" % i], group=g, pads=[k // 2] * 4),
                  helper.make_node("BatchNormalization", ["c%d" % i] + names[1:], ["b%d" % i]),
                  helper.make_node(act, ["b%d" % i], ["y%d" % i])]
        x = "y%d" % i
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("hw", [(3, 12), (2, 6), (12, 20)])
def test_inference_session_folds_constant_weights_once_and_agrees_with_onnxruntime(hw):
    model = _conv_bn_hardswish(6, 12, 5, 1)
    sess = InferenceSession(model.SerializeToString())
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):  # the second run reads the kept folds and (small maps) dense operators
        for n in (2, 3):  # ... for another batch size too
            X = RNG.standard_normal((n, 6) + hw).astype(np.float32)
            X[0, 0, 0, 0] = np.nan  # and stays in its windows as onnxruntime's does
            got, = sess.run(None, {"x": X})
            want, = oracle.run(None, {"x": X})
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            fine = ~np.isnan(want)
            np.testing.assert_allclose(got[fine], want[fine], rtol=1e-4, atol=1e-4)


def test_writable_weights_are_folded_afresh_on_every_call():
    fused = get_kernel("FusedConv", PYTRAIN_DOMAIN).fn
    ctx = OpContext()
    X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bn = [np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32), np.ones(4, np.float32)]
    first, = fused(ctx, X, W, None, *bn, pads=[1, 1, 1, 1], epsilon=0.0)
    W *= 2  # a training step's in-place update
    bn[0][:] = 3
    second, = fused(ctx, X, W, None, *bn, pads=[1, 1, 1, 1], epsilon=0.0)
    np.testing.assert_allclose(second, 6 * first, rtol=1e-5, atol=1e-5)


def test_constant_memo_keeps_only_immutable_inputs():
    ctx = OpContext()
    frozen = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), dtype=np.float32)
    calls = []
    for _ in range(3):
        ctx.constant_memo((frozen, None), lambda: calls.append(1))
    assert len(calls) == 1
    writable = np.arange(4, dtype=np.float32)
    readonly_view = writable.view()
    readonly_view.flags.writeable = False  # read-only, but its owner can still change it
    for _ in range(2):
        ctx.constant_memo((readonly_view,), lambda: calls.append(2))
    assert calls.count(2) == 2
    other = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), dtype=np.float32)
    ctx.constant_memo((other, None), lambda: calls.append(3))  # other arrays: computed afresh
    assert calls.count(3) == 1


def test_resize_plans_are_kept_by_value_read_only_and_errors_are_not():
    from pytrain.errors import InputError
    from pytrain.ops.nn import op_resize

    X = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    attrs = dict(coordinate_transformation_mode="asymmetric", mode="nearest", nearest_mode="floor")
    sizes = np.array([2, 3, 10, 14], np.int64)
    check("Resize", [X, None, None, sizes], attrs, oracle="ort", opset=13)
    args = (0, None, "asymmetric", -0.75, 0, "stretch", "nearest", "floor")
    plan = op_resize.kept_plan("Resize", X.shape, None, None, sizes, *args)
    assert op_resize.kept_plan("Resize", X.shape, None, None, sizes.copy(), *args) is plan
    assert all(not m.idx.flags.writeable for m in plan.maps)
    other = op_resize.kept_plan("Resize", X.shape, None, None, np.array([2, 3, 15, 14], np.int64), *args)
    assert other is not plan and other.out_shape == (2, 3, 15, 14)
    check("Resize", [X, None, None, np.array([2, 3, 15, 21], np.int64)], attrs, oracle="ort", opset=13)
    for _ in range(2):
        with pytest.raises(InputError, match="sizes"):
            op_resize.kept_plan("Resize", X.shape, None, None, np.array([2, 3, 0, 14], np.int64), *args)


MAXPOOLS = [
    # CRNN's pools (2x2, 2x1 and 4x1 windows), then padding, dilation, ceil_mode, 1-D, 3-D, overlap
    ((2, 3, 8, 12), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((2, 4, 8, 5), dict(kernel_shape=[2, 1], strides=[2, 1])),
    ((1, 3, 8, 7), dict(kernel_shape=[4, 1], strides=[4, 1])),
    ((2, 3, 9, 11), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[2, 1], ceil_mode=1)),
    ((2, 3, 10), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 1], strides=[1, 2, 1])),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER")),
    ((1, 1, 3, 3), dict(kernel_shape=[1, 1])),
]


@pytest.mark.parametrize("case", range(len(MAXPOOLS)))
def test_separable_max_pool_against_onnxruntime(case):
    xs, attrs = MAXPOOLS[case]
    X = RNG.standard_normal(xs).astype(np.float32)
    X.reshape(-1)[3::29] = np.inf
    X.reshape(-1)[5::31] = -np.inf
    check("MaxPool", [X], attrs, oracle="ort", rtol=0, atol=0)
    check("MaxPool", [X.astype(np.float64)], attrs, rtol=0, atol=0)


def test_separable_max_pool_keeps_nan_in_its_windows():
    """A NaN makes the maximum of every window that reads it NaN and no other (as the tap-by-tap
    maximum did; onnxruntime skips NaNs instead)."""
    X = RNG.standard_normal((1, 2, 6, 8)).astype(np.float32)
    X[0, 1, 3, 5] = np.nan
    y, _ = get_kernel("MaxPool").fn(OpContext(output_mask=(True, False)), X, kernel_shape=[2, 3],
                                     strides=[1, 2], pads=[0, 1, 0, 1])
    xp = np.pad(X, ((0, 0), (0, 0), (0, 0), (1, 1)), constant_values=-np.inf)
    want = np.full(y.shape, -np.inf, np.float32)
    for i in range(2):
        for j in range(3):
            want = np.maximum(want, xp[:, :, i:i + 5, j:j + 7:2])
    np.testing.assert_array_equal(y, want)
    assert np.isnan(y).sum() == 4  # the 2 x 2 windows that read it


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs, strides", [((8, 30, 1, 1), None), ((3, 7, 1, 1), [2, 2]), ((2, 5, 1), None),
                                         ((0, 4, 1, 1), None)])
def test_single_position_pointwise_conv_against_onnxruntime(xs, strides, bias):
    """Squeeze-excite's 1x1 convs over one position: one (N, C) @ (C, M) product."""
    rank = len(xs) - 2
    X = RNG.standard_normal(xs).astype(np.float32)
    X.reshape(-1)[1::7] = np.inf
    W = RNG.standard_normal((6, xs[1]) + (1,) * rank).astype(np.float32)
    B = RNG.standard_normal(6).astype(np.float32) if bias else None
    attrs = {} if strides is None else dict(strides=strides)
    inputs = [X, W, B] if bias else [X, W]
    got, = check("Conv", inputs, attrs, oracle="ort" if xs[0] else "ref", rtol=1e-5, atol=1e-5)
    assert got.flags.c_contiguous
    check("Conv", [a.astype(np.float64) for a in inputs], attrs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("attrs", [dict(strides=[2, 2]), dict(strides=[2, 2], pads=[1, 0, 0, 1]),
                                   dict(strides=[2, 2], output_padding=[1, 0]), dict(strides=[1, 1]),
                                   dict(strides=[3, 3])])
def test_conv_transpose_per_sample_taps_against_onnxruntime(attrs):
    """ConvTranspose's per-sample product and tap copies (DBNet's 2x2 stride-2 upsampling), with and
    without bias, cropped, padded out and with overlapping taps."""
    X = RNG.standard_normal((2, 5, 4, 6)).astype(np.float32)
    W = RNG.standard_normal((5, 3, 2, 2)).astype(np.float32)
    B = RNG.standard_normal(3).astype(np.float32)
    check("ConvTranspose", [X, W, B], attrs, oracle="ort", rtol=1e-5, atol=1e-5)
    check("ConvTranspose", [X, W], attrs, oracle="ort", rtol=1e-5, atol=1e-5)


STRIDED = [
    # (X shape, M, kernel, attributes): DBNet's stride-2 convs at batch 2, then the corners
    ((2, 16, 40, 40), 32, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((2, 5, 11, 13), 7, (3, 2), dict(pads=[2, 0, 1, 1], strides=[2, 3], dilations=[2, 1])),
    ((3, 4, 17, 9), 6, (1, 1), dict(strides=[2, 2])),
    ((1, 3, 12), 4, (3,), dict(pads=[1, 1], strides=[2])),
    ((2, 3, 10, 10), 4, (3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
]


@pytest.mark.parametrize("case", range(len(STRIDED)))
def test_strided_conv_per_sample_columns_against_onnxruntime(case):
    """Strided ungrouped convs over >= 25 output positions take the per-sample im2col: odd sizes,
    uneven pads, dilation, 1-D, SAME, +-inf (NaN where a window mixes them), float64."""
    xs, m, ks, attrs = STRIDED[case]
    X = RNG.standard_normal(xs).astype(np.float32)
    W = RNG.standard_normal((m, xs[1]) + ks).astype(np.float32)
    B = RNG.standard_normal(m).astype(np.float32)
    check("Conv", [X, W, B], attrs, oracle="ort", rtol=1e-4, atol=1e-4)
    # (onnx.reference dilates the kernel with zeros, so its 0 * inf would spread NaN: finite there)
    check("Conv", [a.astype(np.float64) for a in (X, W, B)], attrs, rtol=1e-10, atol=1e-10)
    X.reshape(-1)[::53] = np.inf
    X.reshape(-1)[7::61] = -np.inf
    check("Conv", [X, W, B], attrs, oracle="ort", rtol=1e-4, atol=1e-4)


def _const(a: np.ndarray) -> np.ndarray:
    """``a`` as an InferenceSession holds a weight: a read-only view of immutable bytes (kept by constant_memo)."""
    return np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape)


def _se_block_model() -> onnx.ModelProto:
    """Every native Conv form in one graph, plain Conv and fused: a 3x3 Conv+BN+Relu (per-sample columns
    on large maps, the batch-folded im2col on small ones), a depthwise 3x3 + HardSwish (dense operators or
    shifted taps), squeeze-excite's single-position 1x1 convs, a 1x1 projection (folded or per-sample
    product), and a 3x3 Conv with fewer outputs than inputs (one product per tap)."""
    def w(*shape):
        return RNG.standard_normal(shape).astype(np.float32) * 0.3
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w0", w(12, 5, 3, 3)), ("b0", w(12)), ("s0", np.abs(w(12)) + 0.5), ("t0", w(12)), ("m0", w(12)),
        ("v0", np.abs(w(12)) + 0.5), ("wd", w(12, 1, 3, 3)), ("wse1", w(4, 12, 1, 1)), ("bse1", w(4)),
        ("wse2", w(12, 4, 1, 1)), ("bse2", w(12)), ("wp", w(7, 12, 1, 1)), ("bp", w(7)), ("wt", w(3, 7, 3, 3))]]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c0", "s0", "t0", "m0", "v0"], ["n0"]),
             helper.make_node("Relu", ["n0"], ["r0"]),
             helper.make_node("Conv", ["r0", "wd"], ["cd"], group=12, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("HardSwish", ["cd"], ["hd"]),
             helper.make_node("GlobalAveragePool", ["hd"], ["g"]),
             helper.make_node("Conv", ["g", "wse1", "bse1"], ["e1"]),
             helper.make_node("Relu", ["e1"], ["e1r"]),
             helper.make_node("Conv", ["e1r", "wse2", "bse2"], ["e2"]),
             helper.make_node("HardSigmoid", ["e2"], ["e2s"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["hd", "e2s"], ["se"]),
             helper.make_node("Conv", ["se", "wp", "bp"], ["p"]),
             helper.make_node("Conv", ["p", "wt"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("hw", [(3, 5), (9, 13), (34, 41)])
def test_conv_plans_kept_per_input_shape_agree_with_onnxruntime(hw):
    model = _se_block_model()
    sess = InferenceSession(model.SerializeToString())
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, special in [(1, False), (3, False), (1, True), (3, True), (2, False)]:  # new, kept, kept ... shapes
        X = RNG.standard_normal((n, 5) + hw).astype(np.float32)
        if special:  # NaN and inf reach every form (the dense depthwise one declines them: its fallback)
            X[0, 1, 1, 2], X[-1, 3, hw[0] - 1, 0], X[-1, 0, 0, hw[1] - 1] = np.nan, np.inf, -np.inf
        got, = sess.run(None, {"x": X})
        want, = oracle.run(None, {"x": X})
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        fine = np.isfinite(want)
        np.testing.assert_allclose(got[fine], want[fine], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["Conv", "FusedConv"])
def test_a_kept_conv_plan_is_not_reused_for_other_attributes_or_shapes(op):
    """One node context called with another input shape, other pads or strides, or another group (as no plan
    does, but a caller could): each call agrees with a fresh context's answer (nothing kept)."""
    domain = PYTRAIN_DOMAIN if op == "FusedConv" else ""
    fn = get_kernel(op, domain).fn
    W = _const(RNG.standard_normal((6, 6, 3, 3)).astype(np.float32))
    Wg = _const(W[:, :3].copy())
    B = _const(RNG.standard_normal(6).astype(np.float32))
    ctx = OpContext()
    calls = [((2, 6, 7, 9), W, {}), ((1, 6, 7, 9), W, {}), ((2, 6, 8, 5), W, {"pads": [1, 1, 1, 1]}),
             ((2, 6, 8, 5), W, {"pads": [1, 1, 1, 1], "strides": [2, 1]}), ((2, 6, 8, 5), Wg, {"group": 2}),
             ((2, 6, 7, 9), W, {})]
    for shape, w, attrs in calls:
        X = RNG.standard_normal(shape).astype(np.float32)
        got, = fn(ctx, X, w, B, **attrs)
        fresh, = fn(OpContext(), X, w.copy(), B.copy(), **attrs)
        want, = check("Conv", [X, w.copy(), B.copy()], attrs, oracle="ort", rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got, fresh)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
