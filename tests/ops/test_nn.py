"""Forward kernels of the NN ops against onnx's ReferenceEvaluator and onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import assert_same, check, run_ort, run_pytrain

from pytrain.errors import GraphError, InputError


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- MatMul / Gemm
@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)),
                                   ((3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,))])
def test_matmul(sa, sb):
    check("MatMul", [rnd(*sa), rnd(*sb, seed=1)])


def test_matmul_float64_and_errors():
    check("MatMul", [rnd(3, 4, dtype=np.float64), rnd(4, 2, seed=1, dtype=np.float64)])
    with pytest.raises(InputError, match="MatMul: inner"):
        run_pytrain("MatMul", [rnd(3, 4), rnd(3, 4)], {})
    with pytest.raises(InputError, match="MatMul: batch"):
        run_pytrain("MatMul", [rnd(2, 3, 4), rnd(3, 4, 5)], {})


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("cshape", [None, (5,), (3, 1), (1, 5), (3, 5), ()])
def test_gemm(ta, tb, cshape):
    a = rnd(4, 3) if ta else rnd(3, 4)
    b = rnd(5, 4, seed=1) if tb else rnd(4, 5, seed=1)
    c = None if cshape is None else rnd(*cshape, seed=2)
    check("Gemm", [a, b, c], {"transA": ta, "transB": tb, "alpha": 0.7, "beta": 1.3})
    check("Gemm", [a, b, c], {"transA": ta, "transB": tb})


def test_gemm_errors():
    with pytest.raises(InputError, match="Gemm: inner"):
        run_pytrain("Gemm", [rnd(3, 4), rnd(3, 5)], {})
    with pytest.raises(InputError, match="Gemm: C"):
        run_pytrain("Gemm", [rnd(3, 4), rnd(4, 5), rnd(4)], {})


# ---------------------------------------------------------------- Conv
CONV_CASES = [
    ((2, 3, 7, 8), (4, 3, 3, 3), {}),
    ((2, 3, 7, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 3, 7, 8), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}),
    ((1, 4, 9, 9), (6, 2, 3, 3), {"group": 2, "strides": [2, 2]}),
    ((2, 4, 6, 7), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise, multiplier 2
    ((2, 4, 6, 7), (4, 1, 3, 3), {"group": 4, "auto_pad": "SAME_UPPER"}),  # depthwise
    ((1, 2, 7, 6), (3, 2, 2, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 7, 6), (3, 2, 2, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 7, 6), (3, 2, 2, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 2, 6, 6), (3, 2, 1, 1), {}),
    ((1, 2, 6, 6), (3, 2, 3, 3), {"kernel_shape": [3, 3], "strides": [3, 3]}),
    ((2, 3, 10), (4, 3, 3), {"pads": [2, 1], "strides": [2], "dilations": [2]}),  # 1-D
    ((2, 4, 10), (4, 2, 3), {"group": 2, "auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs, ws, attrs, bias):
    b = rnd(ws[0], seed=2) if bias else None
    check("Conv", [rnd(*xs), rnd(*ws, seed=1), b], attrs, rtol=1e-4, atol=1e-5)


def test_conv_dtype_and_noncontiguous_input():
    x = rnd(2, 7, 3, 8).transpose(0, 2, 1, 3)  # a strided view
    check("Conv", [x, rnd(4, 3, 3, 3, seed=1)], {"pads": [1, 1, 1, 1]}, rtol=1e-4, atol=1e-5)
    check("Conv", [rnd(1, 2, 5, 5, dtype=np.float64), rnd(2, 2, 3, 3, seed=1, dtype=np.float64)], {})


def test_conv_errors():
    with pytest.raises(InputError, match="Conv: X has 3 channels"):
        run_pytrain("Conv", [rnd(1, 3, 5, 5), rnd(2, 2, 3, 3)], {})
    with pytest.raises(InputError, match="smaller than the dilated kernel"):
        run_pytrain("Conv", [rnd(1, 2, 2, 2), rnd(2, 2, 3, 3)], {})
    with pytest.raises(GraphError, match="auto_pad"):
        run_pytrain("Conv", [rnd(1, 2, 5, 5), rnd(2, 2, 3, 3)], {"auto_pad": "SAME"})
    with pytest.raises(GraphError, match="strides has 1 values, expected 2"):
        run_pytrain("Conv", [rnd(1, 2, 5, 5), rnd(2, 2, 3, 3)], {"strides": [1]})
    with pytest.raises(InputError, match="bias"):
        run_pytrain("Conv", [rnd(1, 2, 5, 5), rnd(2, 2, 3, 3), rnd(3)], {})


# ---------------------------------------------------------------- pooling
POOL_CASES = [
    ((2, 3, 7, 8), {"kernel_shape": [2, 2]}),
    ((2, 3, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((2, 3, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((2, 3, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 1, 1]}),
    ((1, 2, 6, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 7, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ((1, 2, 9, 8), {"kernel_shape": [2, 3], "dilations": [2, 1], "strides": [2, 2], "pads": [1, 1, 0, 1]}),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_maxpool(xs, attrs):
    x = rnd(*xs)
    got = check("MaxPool", [x], attrs, n_outputs=2, oracle="ort")
    # values only (Indices not wanted) take a different path
    y_only = run_pytrain("MaxPool", [x], attrs, n_outputs=2, wants=(True, False))[0]
    assert_same(y_only, got[0], what="MaxPool without Indices")


def test_maxpool_indices_ties_1d_and_ints():
    # ties: every window is constant, onnxruntime reports the first position scanned
    x = np.ones((1, 4, 6, 6), dtype=np.float32)
    check("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [1, 1]}, n_outputs=2, oracle="ort")
    check("MaxPool", [rnd(2, 3, 11)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]},
          n_outputs=2, oracle="ort")
    xi = np.random.default_rng(0).integers(-100, 100, (1, 2, 6, 6)).astype(np.int8)
    check("MaxPool", [xi], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, n_outputs=1, oracle="ort")


def test_maxpool_storage_order_1():
    x = rnd(2, 3, 6, 5)
    check("MaxPool", [x], {"kernel_shape": [2, 2], "storage_order": 1, "pads": [0, 1, 1, 0]},
          n_outputs=2, oracle="ort")


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool(xs, attrs, count_include_pad):
    a = dict(attrs, count_include_pad=count_include_pad)
    check("AveragePool", [rnd(*xs)], a, oracle="ort", opset=19)


def test_averagepool_matches_reference_without_ceil():
    check("AveragePool", [rnd(2, 3, 7, 8)], {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0],
                                             "count_include_pad": 1})
    check("AveragePool", [rnd(2, 3, 9)], {"kernel_shape": [4], "strides": [2], "pads": [2, 1]})


def test_pool_errors():
    with pytest.raises(GraphError, match="MaxPool: attribute kernel_shape"):
        run_pytrain("MaxPool", [rnd(1, 1, 4, 4)], {})
    with pytest.raises(GraphError, match="pads .* must be non-negative"):
        run_pytrain("AveragePool", [rnd(1, 1, 4, 4)], {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]})
    with pytest.raises(InputError, match="AveragePool: input must be"):
        run_pytrain("AveragePool", [rnd(4, 4)], {"kernel_shape": [2, 2]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (1, 2, 2, 3, 2)])
def test_global_pool(op, shape):
    # onnx's reference GlobalMaxPool gets the output shape wrong for non-4-D inputs
    check(op, [rnd(*shape)], oracle="ort")
    with pytest.raises(InputError):
        run_pytrain(op, [rnd(2, 3)], {})


# ---------------------------------------------------------------- normalisation
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batchnorm_inference(shape):
    c = shape[1]
    var = np.abs(rnd(c, seed=4)) + 0.5
    ins = [rnd(*shape), rnd(c, seed=1), rnd(c, seed=2), rnd(c, seed=3), var]
    check("BatchNormalization", ins, {"epsilon": 1e-3}, opset=15)
    check("BatchNormalization", ins, {}, opset=9, oracle="ort")  # the reference's opset 9 is wrong


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 5)])
def test_batchnorm_training_mode(shape):
    c = shape[1]
    var = np.abs(rnd(c, seed=4)) + 0.5
    ins = [rnd(*shape), rnd(c, seed=1), rnd(c, seed=2), rnd(c, seed=3), var]
    check("BatchNormalization", ins, {"training_mode": 1, "momentum": 0.8}, n_outputs=3, opset=15)


def test_batchnorm_errors():
    with pytest.raises(InputError, match="input_var must have shape"):
        run_pytrain("BatchNormalization", [rnd(2, 3), rnd(3), rnd(3), rnd(3), rnd(4)], {})


@pytest.mark.parametrize("shape,axis", [((3, 8), -1), ((2, 3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), -2),
                                        ((2, 3, 4), 0)])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm(shape, axis, bias):
    a = axis % len(shape)
    ins = [rnd(*shape), rnd(*shape[a:], seed=1), rnd(*shape[a:], seed=2) if bias else None]
    got = check("LayerNormalization", ins, {"axis": axis, "epsilon": 1e-4}, n_outputs=3)
    assert got[1].shape == shape[:a] + (1,) * (len(shape) - a)


def test_layernorm_stash_and_broadcast_scale():
    x = rnd(2, 3, 4, dtype=np.float64)
    # stash_type 1: Mean/InvStdDev are float32 (the reference keeps float64, onnxruntime follows the spec)
    check("LayerNormalization", [x, rnd(4, seed=1, dtype=np.float64)], {"axis": 1}, n_outputs=3,
          oracle="ort")
    with pytest.raises(InputError, match="Scale of shape"):
        run_pytrain("LayerNormalization", [rnd(2, 3, 4), rnd(3)], {})


# ---------------------------------------------------------------- Dropout
def test_dropout_inference_is_identity():
    x = rnd(3, 4)
    for ins in ([x], [x, np.array(0.3, np.float32)], [x, np.array(0.3, np.float32), np.array(False)]):
        got = check("Dropout", ins, {}, n_outputs=2, opset=13)
        assert got[1].all()


def test_dropout_training():
    x = np.abs(rnd(200, 50)) + 1
    rng = np.random.default_rng(5)
    y, mask = run_pytrain("Dropout", [x, np.array(0.25, np.float32), np.array(True)], {},
                          n_outputs=2, rng=rng)
    assert y.dtype == np.float32 and mask.dtype == np.bool_ and mask.shape == x.shape
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0), rtol=1e-6)
    assert abs(1 - mask.mean() - 0.25) < 0.02
    # the session's rng drives it: same seed, same mask
    y2, mask2 = run_pytrain("Dropout", [x, np.array(0.25, np.float32), np.array(True)], {},
                            n_outputs=2, rng=np.random.default_rng(5))
    assert np.array_equal(mask, mask2)
    # training with ratio 0 is the identity (the reference agrees)
    check("Dropout", [x, np.array(0.0, np.float32), np.array(True)], {}, n_outputs=2, opset=13)
    with pytest.raises(InputError, match="Dropout: ratio"):
        run_pytrain("Dropout", [x, np.array(1.5, np.float32), np.array(True)], {})


# ---------------------------------------------------------------- Softmax family
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((3, 5), None), ((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), -2)])
def test_softmax(op, shape, axis):
    x = rnd(*shape) * 10
    check(op, [x], {} if axis is None else {"axis": axis}, opset=13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_large_inputs_and_errors(op):
    x = np.array([[1000.0, -1000.0, 0.0], [-1e4, -1e4, -1e4]], dtype=np.float32)
    y = run_pytrain(op, [x], {})[0]
    assert np.isfinite(y).all()
    with pytest.raises(GraphError, match="%s: axis 2 is out of range" % op):
        run_pytrain(op, [x], {"axis": 2})


# ---------------------------------------------------------------- losses
LOSS_CASES = [
    ((5, 4), {}, False),
    ((5, 4), {"reduction": "sum"}, True),
    ((5, 4), {"reduction": "none"}, True),
    ((5, 4), {"ignore_index": 2}, False),
    ((5, 4), {"ignore_index": 2}, True),
    ((3, 4, 2, 3), {"reduction": "mean"}, True),
    ((3, 4, 6), {"reduction": "none", "ignore_index": 1}, True),
    ((3, 4, 6), {"reduction": "sum", "ignore_index": -1}, False),
]


def _labels(shape, seed=3, ignore=None):
    n, c = shape[0], shape[1]
    lab = np.random.default_rng(seed).integers(0, c, (n,) + shape[2:]).astype(np.int64)
    if ignore is not None:
        lab.reshape(-1)[::3] = ignore
    return lab


@pytest.mark.parametrize("shape,attrs,weighted", LOSS_CASES)
def test_softmax_cross_entropy_loss(shape, attrs, weighted):
    ins = [rnd(*shape), _labels(shape, ignore=attrs.get("ignore_index")),
           np.abs(rnd(shape[1], seed=4)) + 0.1 if weighted else None]
    check("SoftmaxCrossEntropyLoss", ins, attrs, n_outputs=2, opset=13)
    check("SoftmaxCrossEntropyLoss", ins, attrs, n_outputs=1, opset=13)


@pytest.mark.parametrize("shape,attrs,weighted", LOSS_CASES)
def test_negative_log_likelihood_loss(shape, attrs, weighted):
    ins = [rnd(*shape), _labels(shape, ignore=attrs.get("ignore_index")),
           np.abs(rnd(shape[1], seed=4)) + 0.1 if weighted else None]
    check("NegativeLogLikelihoodLoss", ins, attrs, opset=13)


def test_loss_against_torch():
    torch = pytest.importorskip("torch")
    x = rnd(6, 5, 3)
    lab = _labels(x.shape, ignore=-100)
    w = np.abs(rnd(5, seed=4)) + 0.1
    got = run_pytrain("SoftmaxCrossEntropyLoss", [x, lab, w], {"ignore_index": -100})[0]
    ref = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(lab),
                                            weight=torch.from_numpy(w), ignore_index=-100)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5)


def test_loss_errors():
    x = rnd(4, 3)
    with pytest.raises(InputError, match=r"target values must lie in \[0, 3\)"):
        run_pytrain("SoftmaxCrossEntropyLoss", [x, np.array([0, 1, 3, 0])], {})
    with pytest.raises(InputError, match="target shape"):
        run_pytrain("NegativeLogLikelihoodLoss", [x, np.array([0, 1, 2])], {})
    with pytest.raises(GraphError, match="reduction must be"):
        run_pytrain("NegativeLogLikelihoodLoss", [x, np.array([0, 1, 2, 0])], {"reduction": "avg"})
    with pytest.raises(InputError, match="weight must have shape"):
        run_pytrain("NegativeLogLikelihoodLoss", [x, np.array([0, 1, 2, 0]), rnd(4)], {})


# ---------------------------------------------------------------- windows helpers
@pytest.mark.parametrize("auto_pad,ceil_mode", [("NOTSET", 0), ("NOTSET", 1), ("SAME_UPPER", 0),
                                                ("SAME_LOWER", 0), ("VALID", 0)])
def test_windows_geometry_matches_onnxruntime_shapes(auto_pad, ceil_mode):
    from pytrain.ops.windows import geometry

    x = rnd(1, 1, 9, 8)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        attrs.update(pads=[1, 0, 0, 1], ceil_mode=ceil_mode)
    ref = run_ort("MaxPool", [x], attrs)[0]
    win = geometry("MaxPool", x.shape, attrs["kernel_shape"], attrs["strides"], None,
                   attrs.get("pads"), auto_pad, ceil_mode)
    assert win.out_shape == ref.shape[2:]
