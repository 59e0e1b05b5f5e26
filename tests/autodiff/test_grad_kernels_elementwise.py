"""Elementwise gradient kernels, SumToShape and MatMulGrad against finite differences (float64)
and torch.autograd (float32)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gradcheck import numeric_grad, run_kernel


def rng(seed=0):
    return np.random.default_rng(seed)


def away_from_zero(shape, seed=0, gap=0.05):
    """Random values with no element near 0, where relu-like kernels are not differentiable."""
    x = rng(seed).standard_normal(shape)
    return np.where(np.abs(x) < gap, x + np.sign(x + 1e-12) * 2 * gap, x)


def test_numeric_grad_of_known_function():
    a = rng(1).standard_normal((2, 3))
    b = rng(2).standard_normal((3,))
    g = numeric_grad(lambda a, b: np.sum(np.sin(a) * b), [a, b], 0)
    np.testing.assert_allclose(g, np.cos(a) * b, rtol=1e-8, atol=1e-9)
    g = numeric_grad(lambda a, b: np.sum(np.sin(a) * b), [a, b], 1)
    np.testing.assert_allclose(g, np.sin(a).sum(0), rtol=1e-8, atol=1e-9)


def test_relu_grad():
    x = away_from_zero((3, 4))
    dy = rng(1).standard_normal((3, 4))
    y = np.maximum(x, 0)
    (dx,) = run_kernel("ReluGrad", dy, y)
    num = numeric_grad(lambda x: np.sum(dy * np.maximum(x, 0)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-9)
    (dx32,) = run_kernel("ReluGrad", dy.astype(np.float32), y.astype(np.float32))
    assert dx32.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_relu_grad_selects_dy_bits_and_never_leaks_nan_or_inf(dtype):
    """dX is np.where(Y > 0, dY, +0.0) to the bit: inf/nan gradients stay out of dead units,
    a nan Y counts as dead, -0.0 and nan gradients of live units pass unchanged."""
    y = np.array([[1, -1, 0, np.nan], [-0.0, 2, np.inf, 3]], dtype)
    dy = np.array([[np.nan, np.inf, 3, 4], [5, -0.0, 7, np.nan]], dtype)
    (dx,) = run_kernel("ReluGrad", dy, y)
    assert dx.dtype == dtype
    assert dx.tobytes() == np.where(y > 0, dy, np.zeros((), dtype)).tobytes()
    (dxt,) = run_kernel("ReluGrad", dy.T, y.T)  # non-contiguous views
    assert dxt.tobytes() == np.ascontiguousarray(np.where(y > 0, dy, np.zeros((), dtype)).T).tobytes()


@pytest.mark.parametrize("alpha", [0.01, 0.2])
def test_leakyrelu_grad(alpha):
    x = away_from_zero((3, 5))
    dy = rng(1).standard_normal(x.shape)
    (dx,) = run_kernel("LeakyReluGrad", dy, x, alpha=alpha)
    num = numeric_grad(lambda x: np.sum(dy * np.where(x > 0, x, alpha * x)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-9)
    (dx32,) = run_kernel("LeakyReluGrad", dy.astype(np.float32), x.astype(np.float32), alpha=alpha)
    assert dx32.dtype == np.float32


HARD_SPECIALS = [np.nan, np.inf, -np.inf, -3.0, 3.0, 0.0, -2.5, 2.5, 1.0, -1.0, 10.0, -10.0, -0.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hard_swish_and_hard_sigmoid_grads_against_torch(dtype):
    x = np.concatenate([np.array(HARD_SPECIALS), rng(3).uniform(-5, 5, 200)]).astype(dtype)
    dy = rng(4).standard_normal(x.shape).astype(dtype)
    for op, fn, attrs in (("HardSwishGrad", torch.nn.functional.hardswish, {}),
                          ("HardSigmoidGrad", torch.nn.functional.hardsigmoid, {"alpha": 1 / 6, "beta": 0.5})):
        xt = torch.tensor(x, requires_grad=True)
        fn(xt).backward(torch.tensor(dy))
        (dx,) = run_kernel(op, dy, x, **attrs)
        assert dx.dtype == dtype and dx.shape == x.shape
        finite = np.isfinite(x)
        np.testing.assert_allclose(dx[finite], xt.grad.numpy()[finite], rtol=1e-6, atol=1e-7)
        if op == "HardSwishGrad":  # NaN stays NaN; inf: the flat parts' slope 0 / 1
            assert np.isnan(dx[0]) and dx[1] == dy[1] and dx[2] == 0
        else:  # outside the linear part (NaN included) the gradient is 0
            assert dx[0] == 0 and dx[1] == 0 and dx[2] == 0
    (dx,) = run_kernel("HardSigmoidGrad", dy, x)  # ONNX's defaults alpha=0.2, beta=0.5
    np.testing.assert_allclose(dx, np.where((x * 0.2 + 0.5 > 0) & (x * 0.2 + 0.5 < 1), dy * dtype(0.2), 0))


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_grad(approximate):
    x = rng(3).standard_normal((4, 5)) * 3
    x[0, :] = [-7.0, -2.5, 0.0, 2.5, 7.0]  # every piece of the erf approximation
    dy = rng(4).standard_normal(x.shape)
    (dx,) = run_kernel("GeluGrad", dy, x, approximate=approximate)
    num = numeric_grad(lambda x: np.sum(dy * _gelu(x, approximate)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-8)

    xt = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    torch.nn.functional.gelu(xt, approximate=approximate).backward(torch.tensor(dy, dtype=torch.float32))
    (dx32,) = run_kernel("GeluGrad", dy.astype(np.float32), x.astype(np.float32), approximate=approximate)
    assert dx32.dtype == np.float32
    np.testing.assert_allclose(dx32, xt.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_erf_helper_matches_math_erf():
    from pytrain.ops.special import erf
    x = np.concatenate([np.linspace(-8, 8, 4001), [0.0, 2.0, -2.0, 6.0, -6.0, np.inf, -np.inf]])
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), ref, rtol=0, atol=2e-15)
    assert np.isnan(erf(np.array([np.nan]))[0])
    assert erf(x.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_and_logsoftmax_grad(axis):
    x = rng(5).standard_normal((3, 4, 2))
    dy = rng(6).standard_normal(x.shape)

    def softmax(x):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    (dx,) = run_kernel("SoftmaxGrad", dy, softmax(x), axis=axis)
    num = numeric_grad(lambda x: np.sum(dy * softmax(x)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-9)

    (dx,) = run_kernel("LogSoftmaxGrad", dy, np.log(softmax(x)), axis=axis)
    num = numeric_grad(lambda x: np.sum(dy * np.log(softmax(x))), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-9)


def test_softmax_grads_match_torch_float32():
    x = rng(7).standard_normal((4, 6)).astype(np.float32)
    dy = rng(8).standard_normal(x.shape).astype(np.float32)
    for op, fn in (("SoftmaxGrad", torch.softmax), ("LogSoftmaxGrad", torch.log_softmax)):
        xt = torch.tensor(x, requires_grad=True)
        y = fn(xt, 1)
        y.backward(torch.tensor(dy))
        (dx,) = run_kernel(op, dy, y.detach().numpy(), axis=1)
        assert dx.dtype == np.float32
        np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("ratio", [None, 0.0, 0.3])
def test_dropout_grad(ratio):
    x = rng(9).standard_normal((4, 5))
    dy = rng(10).standard_normal(x.shape)
    mask = rng(11).random(x.shape) > 0.4
    r = 0.5 if ratio is None else ratio
    args = [dy, mask] + ([] if ratio is None else [np.array(ratio, dtype=np.float32)])
    (dx,) = run_kernel("DropoutGrad", *args)
    if r == 0.0:
        fwd = lambda x: np.sum(dy * x)  # noqa: E731  ratio 0: Dropout is the identity
    else:
        fwd = lambda x: np.sum(dy * np.where(mask, x / (1 - r), 0.0))  # noqa: E731
    np.testing.assert_allclose(dx, numeric_grad(fwd, [x], 0), rtol=1e-7, atol=1e-9)
    (dx32,) = run_kernel("DropoutGrad", dy.astype(np.float32), mask, np.array(0.3, np.float32))
    assert dx32.dtype == np.float32


def test_clip_grad():
    x = away_from_zero((4, 5), seed=12) * 2
    x = np.where(np.abs(np.abs(x) - 1.0) < 0.05, x * 1.2, x)  # nothing at the bounds
    dy = rng(13).standard_normal(x.shape)
    lo, hi = np.array(-1.0), np.array(1.0)
    for args, fwd in (((lo, hi), lambda x: np.clip(x, -1, 1)),
                      ((lo, None), lambda x: np.maximum(x, -1)),
                      ((None, hi), lambda x: np.minimum(x, 1)),
                      ((None, None), lambda x: x)):
        (dx,) = run_kernel("ClipGrad", dy, x, *args)
        num = numeric_grad(lambda x: np.sum(dy * fwd(x)), [x], 0)
        np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-9)


def test_clip_grad_at_the_bounds_matches_torch():
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], dtype=np.float32)
    xt = torch.tensor(x, requires_grad=True)
    torch.clamp(xt, -1.0, 1.0).sum().backward()
    (dx,) = run_kernel("ClipGrad", np.ones_like(x), x, np.array(-1.0, np.float32), np.array(1.0, np.float32))
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, xt.grad.numpy())


@pytest.mark.parametrize("x_shape,y_shape", [
    ((3, 1), (2, 3, 4)), ((4,), (2, 3, 4)), ((1, 1), (3, 2)), ((), (2, 2)), ((2, 1, 4), (2, 3, 4)),
])
def test_sum_to_shape(x_shape, y_shape):
    x = rng(14).standard_normal(x_shape)
    dy = rng(15).standard_normal(y_shape)
    (dx,) = run_kernel("SumToShape", dy, x)
    num = numeric_grad(lambda x: np.sum(dy * np.broadcast_to(x, y_shape)), [x], 0)
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-9)


def test_sum_to_shape_same_shape_is_identity():
    dy = np.ones((2, 3), np.float32)
    assert run_kernel("SumToShape", dy, np.zeros((2, 3), np.float32))[0] is dy


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (2, 3, 4)), ((2, 5, 3), (3,)),
    ((2, 3), (3, 4)), ((2, 5, 3), (3, 4)), ((5, 3), (2, 3, 4)), ((2, 1, 5, 3), (4, 3, 2)),
    ((1, 5, 3), (2, 3, 4)),
])
def test_matmul_grad(a_shape, b_shape):
    a = rng(16).standard_normal(a_shape)
    b = rng(17).standard_normal(b_shape)
    dy = np.asarray(rng(18).standard_normal(np.matmul(a, b).shape))
    da, db = run_kernel("MatMulGrad", dy, a, b)
    f = lambda a, b: np.sum(dy * np.matmul(a, b))  # noqa: E731
    assert da.shape == a.shape and db.shape == b.shape
    np.testing.assert_allclose(da, numeric_grad(f, [a, b], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, numeric_grad(f, [a, b], 1), rtol=1e-6, atol=1e-8)


def test_matmul_grad_float32_matches_torch_and_skips_unwanted():
    a = rng(19).standard_normal((2, 5, 3)).astype(np.float32)
    b = rng(20).standard_normal((3, 4)).astype(np.float32)
    dy = rng(21).standard_normal((2, 5, 4)).astype(np.float32)
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.matmul(at, bt).backward(torch.tensor(dy))
    da, db = run_kernel("MatMulGrad", dy, a, b)
    assert da.dtype == db.dtype == np.float32
    np.testing.assert_allclose(da, at.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-4, atol=1e-5)
    da, db = run_kernel("MatMulGrad", dy, a, b, wants=(False, True))
    assert da is None and db is not None
