"""Layer gradient kernels (ConvGrad, pools, BatchNorm, LayerNorm) against finite differences of
pytrain's forward kernels (float64) and against torch.autograd (float32)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from gradcheck import numeric_grad, run_kernel


def rng(seed=0):
    return np.random.default_rng(seed)


def fwd(op, *inputs, **attrs):
    """Output 0 of pytrain's standard forward kernel."""
    return run_kernel(op, *inputs, domain="", wants=(True,), **attrs)[0]


# ----------------------------------------------------------------------------------------- Conv

CONV_CASES = [
    # x_shape, w_shape, attrs
    ((2, 3, 5, 6), (4, 3, 3, 3), {}),
    ((1, 2, 7, 6), (3, 2, 3, 2), {"strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 2, 7, 7), (2, 2, 3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    ((2, 4, 5, 5), (6, 2, 3, 3), {"group": 2, "strides": [1, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 4, 4), (4, 1, 2, 2), {"group": 4}),
    ((2, 3, 9), (2, 3, 3), {"strides": [2], "pads": [1, 2], "dilations": [2]}),
    ((1, 2, 6, 5), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 6, 5), (3, 2, 2, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 6, 5), (3, 2, 3, 2), {"auto_pad": "VALID", "strides": [2, 1]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv_grad_finite_differences(x_shape, w_shape, attrs):
    x = rng(1).standard_normal(x_shape)
    w = rng(2).standard_normal(w_shape)
    y = fwd("Conv", x, w, **attrs)
    dy = rng(3).standard_normal(y.shape)
    dx, dw, db = run_kernel("ConvGrad", dy, x, w, **attrs)
    f = lambda x, w, b: np.sum(dy * fwd("Conv", x, w, b, **attrs))  # noqa: E731
    b = np.zeros(w_shape[0])
    np.testing.assert_allclose(dx, numeric_grad(f, [x, w, b], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dw, numeric_grad(f, [x, w, b], 1), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, numeric_grad(f, [x, w, b], 2), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("x_shape,w_shape,stride,pad,dil,group", [
    ((2, 4, 8, 7), (6, 2, 3, 3), (2, 1), (1, 2), (1, 2), 2),
    ((3, 3, 6, 6), (5, 3, 1, 1), (1, 1), (0, 0), (1, 1), 1),
])
def test_conv_grad_matches_torch_float32(x_shape, w_shape, stride, pad, dil, group):
    x = rng(4).standard_normal(x_shape).astype(np.float32)
    w = rng(5).standard_normal(w_shape).astype(np.float32)
    b = rng(6).standard_normal(w_shape[0]).astype(np.float32)
    xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    y = torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=pad, dilation=dil, groups=group)
    dy = rng(7).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    attrs = {"strides": list(stride), "pads": list(pad) * 2, "dilations": list(dil), "group": group}
    dx, dw, db = run_kernel("ConvGrad", dy, x, w, **attrs)
    for got, want in ((dx, xt), (dw, wt), (db, bt)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_grad_skips_unwanted_outputs():
    x = rng(8).standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng(9).standard_normal((3, 2, 3, 3)).astype(np.float32)
    dy = np.ones((1, 3, 2, 2), np.float32)
    dx, dw, db = run_kernel("ConvGrad", dy, x, w, wants=(False, True))
    assert dx is None and db is None and dw.shape == w.shape
    full = run_kernel("ConvGrad", dy, x, w)
    np.testing.assert_array_equal(dw, full[1])


# ------------------------------------------------------------------------------------ MaxPool

def ort_maxpool(x, **attrs):
    node = helper.make_node("MaxPool", ["X"], ["Y", "I"], **attrs)
    elem = TensorProto.DOUBLE if x.dtype == np.float64 else TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", elem, x.shape)],
        [helper.make_tensor_value_info("Y", elem, None), helper.make_tensor_value_info("I", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda v: sess.run(None, {"X": v})


MAXPOOL_CASES = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},  # overlapping windows
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", MAXPOOL_CASES)
def test_maxpool_grad_with_onnxruntime_indices(attrs):
    x = rng(10).standard_normal((2, 3, 5, 6))
    run = ort_maxpool(x, **attrs)
    y, idx = run(x)
    dy = rng(11).standard_normal(y.shape)
    (dx,) = run_kernel("MaxPoolGrad", dy, idx, x)
    num = numeric_grad(lambda x: np.sum(dy * run(x)[0]), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


def test_maxpool_grad_matches_torch_float32():
    x = rng(12).standard_normal((2, 3, 6, 7)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.max_pool2d(xt, 3, stride=2, padding=1)
    dy = rng(13).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    _, idx = ort_maxpool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])(x)
    (dx,) = run_kernel("MaxPoolGrad", dy, idx, x)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs", MAXPOOL_CASES)
def test_pytrain_maxpool_indices_match_onnxruntime(attrs):
    # MaxPoolGrad consumes whatever pytrain's own MaxPool produced at training time.
    x = rng(14).standard_normal((2, 3, 5, 6)).astype(np.float32)
    y, idx = run_kernel("MaxPool", x, domain="", wants=(True, True), **attrs)
    oy, oidx = ort_maxpool(x, **attrs)(x)
    np.testing.assert_array_equal(y, oy)
    np.testing.assert_array_equal(idx, oidx)


# -------------------------------------------------------------------------------- AveragePool

AVGPOOL_CASES = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2], "strides": [2], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", AVGPOOL_CASES)
def test_averagepool_grad_finite_differences(attrs):
    shape = (2, 2, 7) if len(attrs["kernel_shape"]) == 1 else (2, 2, 6, 7)
    x = rng(15).standard_normal(shape)
    y = fwd("AveragePool", x, **attrs)
    dy = rng(16).standard_normal(y.shape)
    (dx,) = run_kernel("AveragePoolGrad", dy, x, **attrs)
    num = numeric_grad(lambda x: np.sum(dy * fwd("AveragePool", x, **attrs)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_grad_matches_torch_float32(ceil_mode, count_include_pad):
    x = rng(17).standard_normal((2, 3, 6, 6)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.avg_pool2d(xt, 3, stride=2, padding=1, ceil_mode=bool(ceil_mode),
                                       count_include_pad=bool(count_include_pad))
    dy = rng(18).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    (dx,) = run_kernel("AveragePoolGrad", dy, x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                       ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_global_averagepool_grad():
    x = rng(19).standard_normal((2, 3, 4, 5))
    dy = rng(20).standard_normal((2, 3, 1, 1))
    (dx,) = run_kernel("GlobalAveragePoolGrad", dy, x)
    num = numeric_grad(lambda x: np.sum(dy * x.mean(axis=(2, 3), keepdims=True)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-9)
    (dx32,) = run_kernel("GlobalAveragePoolGrad", dy.astype(np.float32), x.astype(np.float32))
    assert dx32.dtype == np.float32


# ---------------------------------------------------------------------------------- BatchNorm

def bn_forward(x, scale, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 5), (2, 3, 3, 4)])
def test_batchnorm_training_matches_torch(shape):
    c = shape[1]
    x = (rng(21).standard_normal(shape) * 2 + 0.5).astype(np.float32)
    scale = rng(22).standard_normal(c).astype(np.float32)
    b = rng(23).standard_normal(c).astype(np.float32)
    rm = rng(24).standard_normal(c).astype(np.float32)
    rv = rng(25).random(c).astype(np.float32) + 0.5
    cls = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    bn = cls(c, eps=1e-3, momentum=0.2).train()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(scale))
        bn.bias.copy_(torch.tensor(b))
        bn.running_mean.copy_(torch.tensor(rm))
        bn.running_var.copy_(torch.tensor(rv))
    xt = torch.tensor(x, requires_grad=True)
    yt = bn(xt)
    # ONNX momentum weighs the old running value: torch's 0.2 is ONNX's 0.8.
    y, rm_out, rv_out, mean, invstd = run_kernel("BatchNormTraining", x, scale, b, rm, rv,
                                                 epsilon=1e-3, momentum=0.8)
    for got in (y, rm_out, rv_out, mean, invstd):
        assert got.dtype == np.float32
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm_out, bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv_out, bn.running_var.numpy(), rtol=1e-5, atol=1e-6)
    axes = (0,) + tuple(range(2, len(shape)))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(axis=axes), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(invstd, 1 / np.sqrt(x64.var(axis=axes) + 1e-3), rtol=1e-5)

    # And its backward, BatchNormGrad, against torch's.
    dy = rng(26).standard_normal(shape).astype(np.float32)
    yt.backward(torch.tensor(dy))
    dx, dscale, db = run_kernel("BatchNormGrad", dy, x, scale, mean, invstd)
    for got, want in ((dx, xt.grad), (dscale, bn.weight.grad), (db, bn.bias.grad)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_batchnorm_training_default_momentum_and_skipped_outputs():
    x = rng(27).standard_normal((5, 2)).astype(np.float32)
    ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    y, rm, rv, _, _ = run_kernel("BatchNormTraining", x, ones, zeros, zeros, ones)
    np.testing.assert_allclose(rm, 0.1 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-5)
    out = run_kernel("BatchNormTraining", x, ones, zeros, zeros, ones, wants=(True, False, False, True, True))
    assert out[1] is None and out[2] is None
    np.testing.assert_array_equal(out[0], y)


def test_batchnorm_training_needs_more_than_one_value_per_channel():
    from pytrain.errors import KernelError
    one = np.ones(3, np.float32)
    with pytest.raises(KernelError, match="more than one value per channel"):
        run_kernel("BatchNormTraining", np.ones((1, 3, 1, 1), np.float32), one, one, one, one)


@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 2, 3)])
def test_batchnorm_grad_finite_differences(shape):
    c = shape[1]
    x = rng(28).standard_normal(shape)
    scale = rng(29).standard_normal(c)
    b = rng(30).standard_normal(c)
    dy = rng(31).standard_normal(shape)
    _, _, _, mean, invstd = run_kernel("BatchNormTraining", x, scale, b, np.zeros(c), np.ones(c))
    dx, dscale, db = run_kernel("BatchNormGrad", dy, x, scale, mean, invstd)
    f = lambda x, s, b: np.sum(dy * bn_forward(x, s, b))  # noqa: E731
    np.testing.assert_allclose(dx, numeric_grad(f, [x, scale, b], 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dscale, numeric_grad(f, [x, scale, b], 1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(db, numeric_grad(f, [x, scale, b], 2), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------- LayerNorm

@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((3, 5), -1, (5,)),
    ((2, 3, 4), -1, (4,)),
    ((2, 3, 4), 1, (3, 4)),
    ((2, 3, 4), -2, (4,)),  # Scale broadcast over the normalised shape
])
def test_layernorm_grad_finite_differences(shape, axis, scale_shape):
    x = rng(32).standard_normal(shape)
    scale = rng(33).standard_normal(scale_shape)
    b = rng(34).standard_normal(scale_shape)
    # stash_type double: the default float32 statistics are too coarse for finite differences.
    y, mean, invstd = run_kernel("LayerNormalization", x, scale, b, domain="", axis=axis, stash_type=11)
    dy = rng(35).standard_normal(shape)
    dx, dscale, db = run_kernel("LayerNormalizationGrad", dy, x, scale, mean, invstd, axis=axis)
    f = lambda x, s, b: np.sum(dy * fwd("LayerNormalization", x, s, b, axis=axis, stash_type=11))  # noqa: E731
    assert dscale.shape == db.shape == scale_shape
    np.testing.assert_allclose(dx, numeric_grad(f, [x, scale, b], 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dscale, numeric_grad(f, [x, scale, b], 1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(db, numeric_grad(f, [x, scale, b], 2), rtol=1e-5, atol=1e-7)


def test_layernorm_grad_matches_torch_float32():
    x = rng(36).standard_normal((2, 3, 8)).astype(np.float32)
    scale = rng(37).standard_normal(8).astype(np.float32)
    b = rng(38).standard_normal(8).astype(np.float32)
    xt, st, bt = (torch.tensor(v, requires_grad=True) for v in (x, scale, b))
    yt = torch.nn.functional.layer_norm(xt, (8,), st, bt, eps=1e-5)
    dy = rng(39).standard_normal(x.shape).astype(np.float32)
    yt.backward(torch.tensor(dy))
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True).astype(np.float32)
    invstd = (1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)).astype(np.float32)
    dx, dscale, db = run_kernel("LayerNormalizationGrad", dy, x, scale, mean, invstd)
    for got, want in ((dx, xt), (dscale, st), (db, bt)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-4, atol=1e-4)
