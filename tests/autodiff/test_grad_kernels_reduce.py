"""Gradient kernels of the reductions (ReduceNormGrad, ReduceProdGrad, GlobalMaxPoolGrad, TopKGrad)
against float64 finite differences of pytrain's forward kernels, and the tie rules they document."""
from __future__ import annotations

import numpy as np
import pytest

from gradcheck import numeric_grad, run_kernel

from pytrain.errors import KernelError
from pytrain.ops import PYTRAIN_DOMAIN, supported_ops


def rng(seed=0):
    return np.random.default_rng(seed)


def fwd(op, *inputs, n=0, **attrs):
    """Output ``n`` of pytrain's standard forward kernel."""
    return run_kernel(op, *inputs, domain="", wants=(True, True), **attrs)[n]


def test_kernels_are_registered():
    assert {"ReduceNormGrad", "ReduceProdGrad", "GlobalMaxPoolGrad", "TopKGrad"} <= set(supported_ops(PYTRAIN_DOMAIN))


# ----------------------------------------------------------------------------- ReduceNormGrad
NORM_MODES = [("ReduceL1", "l1"), ("ReduceL2", "l2"), ("ReduceSumSquare", "sum_square"),
              ("ReduceLogSum", "log_sum"), ("ReduceLogSumExp", "log_sum_exp")]
AXES_FORMS = [  # (axes, keepdims, noop): attribute form; the same axes are also given as input
    ([1], 1, 0), ([1], 0, 0), ([0, -1], 0, 0), (None, 1, 0), (None, 0, 0), ([], 0, 1), ([-1, 0, 1], 1, 0),
]


def _x_for(op, shape, seed=1):
    x = rng(seed).uniform(0.2, 1.5, shape) * rng(seed + 7).choice([-1.0, 1.0], shape)  # away from |x| = 0
    return np.abs(x) if op == "ReduceLogSum" else x


@pytest.mark.parametrize("op,mode", NORM_MODES)
@pytest.mark.parametrize("axes,keepdims,noop", AXES_FORMS)
def test_reduce_norm_grad_finite_differences(op, mode, axes, keepdims, noop):
    x = _x_for(op, (2, 3, 4))
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    ax_in = None if axes is None else np.array(axes, np.int64)
    y = fwd(op, x, ax_in, **attrs)
    dy = rng(3).standard_normal(y.shape)
    f = lambda x: np.sum(dy * fwd(op, x, ax_in, **attrs))  # noqa: E731
    want = numeric_grad(f, [x], 0)
    (got,) = run_kernel("ReduceNormGrad", dy, x, y, ax_in, mode=mode, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    assert got.dtype == np.float64 and got.shape == x.shape
    # the opset 13 form: axes as an attribute
    (got13,) = run_kernel("ReduceNormGrad", dy, x, y, None, mode=mode, axes=axes, **attrs)
    np.testing.assert_allclose(got13, want, rtol=1e-6, atol=1e-8)


def test_reduce_norm_grad_edge_values():
    # L2 of an all-zero group: gradient 0 (as torch.linalg.vector_norm), not NaN
    x = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, -4.0]])
    y = fwd("ReduceL2", x, axes=[1], keepdims=0)
    (dx,) = run_kernel("ReduceNormGrad", np.ones(2), x, y, mode="l2", axes=[1], keepdims=0)
    np.testing.assert_allclose(dx, [[0, 0, 0], [0.6, 0, -0.8]])
    # L1 at 0: sign(0) = 0 (torch's choice)
    (dx,) = run_kernel("ReduceNormGrad", np.ones(2), x, None, mode="l1", axes=[1], keepdims=0)
    np.testing.assert_array_equal(dx, [[0, 0, 0], [1, 0, -1]])
    # LogSumExp with huge values: the softmax, no overflow; a group of only -inf: 0
    x = np.array([[1000.0, 1000.0, -np.inf], [-np.inf, -np.inf, -np.inf]])
    y = fwd("ReduceLogSumExp", x, axes=[1], keepdims=1)
    with np.errstate(all="raise"):
        (dx,) = run_kernel("ReduceNormGrad", np.ones((2, 1)), x, y, mode="log_sum_exp", axes=[1])
    np.testing.assert_allclose(dx, [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]], rtol=1e-12, atol=0)


def test_reduce_norm_grad_float32_and_errors():
    x = _x_for("ReduceL2", (3, 4)).astype(np.float32)
    y = fwd("ReduceL2", x, axes=[1])
    (dx,) = run_kernel("ReduceNormGrad", np.ones_like(y), x, y, mode="l2", axes=[1])
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, x / y, rtol=1e-6)
    with pytest.raises(KernelError, match="mode must be one of"):
        run_kernel("ReduceNormGrad", np.ones_like(y), x, y, mode="l3", axes=[1])
    with pytest.raises(KernelError, match="needs the reduction's output Y"):
        run_kernel("ReduceNormGrad", np.ones_like(y), x, None, mode="log_sum_exp", axes=[1])


# ----------------------------------------------------------------------------- ReduceProdGrad
@pytest.mark.parametrize("axes,keepdims,noop", AXES_FORMS)
@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_reduce_prod_grad_finite_differences(axes, keepdims, noop, zeros):
    x = _x_for("ReduceProd", (2, 3, 4), seed=5)
    # zeros in the groups: the gradient is the product of the others, finite (never Y / X)
    if zeros >= 1:
        x[0, 1, 0] = 0.0
    if zeros == 2:  # a second zero in the same group along axis 1 (and in the full reduction)
        x[0, 2, 0] = 0.0
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    ax_in = None if axes is None else np.array(axes, np.int64)
    y = fwd("ReduceProd", x, ax_in, **attrs)
    dy = rng(3).standard_normal(y.shape)
    f = lambda x: np.sum(dy * fwd("ReduceProd", x, ax_in, **attrs))  # noqa: E731
    want = numeric_grad(f, [x], 0)
    (got,) = run_kernel("ReduceProdGrad", dy, x, ax_in, **attrs)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    (got13,) = run_kernel("ReduceProdGrad", dy, x, None, axes=axes, **attrs)
    np.testing.assert_allclose(got13, want, rtol=1e-6, atol=1e-8)


def test_reduce_prod_grad_with_zeros_exactly():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]])
    (dx,) = run_kernel("ReduceProdGrad", np.ones(3), x, axes=[1], keepdims=0)
    np.testing.assert_array_equal(dx, [[0, 6, 0], [0, 0, 0], [8, 4, 2]])


# ----------------------------------------------------------------------------- GlobalMaxPoolGrad
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7), (1, 2, 2, 3, 2)])
def test_global_max_pool_grad_finite_differences(shape):
    x = rng(2).permutation(np.prod(shape)).reshape(shape).astype(np.float64) * 0.1  # distinct values
    y = fwd("GlobalMaxPool", x)
    dy = rng(3).standard_normal(y.shape)
    f = lambda x: np.sum(dy * fwd("GlobalMaxPool", x))  # noqa: E731
    (got,) = run_kernel("GlobalMaxPoolGrad", dy, x)
    np.testing.assert_allclose(got, numeric_grad(f, [x], 0), rtol=1e-6, atol=1e-8)


def test_global_max_pool_grad_ties_go_to_the_first_maximum():
    x = np.array([[[[1.0, 3.0], [3.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]])  # (1, 2, 2, 2), ties
    (dx,) = run_kernel("GlobalMaxPoolGrad", np.array([[[[2.0]], [[5.0]]]]), x)
    np.testing.assert_array_equal(dx, [[[[0, 2], [0, 0]], [[5, 0], [0, 0]]]])
    # a NaN is the maximum (GlobalMaxPool's output is NaN): dY goes to it
    x[0, 0, 1, 1] = np.nan
    (dx,) = run_kernel("GlobalMaxPoolGrad", np.array([[[[2.0]], [[5.0]]]]), x)
    np.testing.assert_array_equal(dx[0, 0], [[0, 0], [0, 2]])


# ----------------------------------------------------------------------------- TopKGrad
@pytest.mark.parametrize("axis,k,largest", [(-1, 2, 1), (0, 3, 0), (1, 4, 1), (1, 0, 1), (2, 5, 0)])
def test_topk_grad_finite_differences(axis, k, largest):
    x = rng(4).permutation(4 * 4 * 5).reshape(4, 4, 5).astype(np.float64) * 0.01  # distinct: no ties
    K = np.array([k], np.int64)
    vals, idx = fwd("TopK", x, K, n=0, axis=axis, largest=largest), fwd("TopK", x, K, n=1, axis=axis, largest=largest)
    dv = rng(3).standard_normal(vals.shape)
    f = lambda x: np.sum(dv * fwd("TopK", x, K, axis=axis, largest=largest))  # noqa: E731
    (got,) = run_kernel("TopKGrad", dv, idx, x, axis=axis)
    np.testing.assert_allclose(got, numeric_grad(f, [x], 0), rtol=1e-6, atol=1e-8)


def test_topk_grad_errors():
    with pytest.raises(KernelError, match="differs from Indices shape"):
        run_kernel("TopKGrad", np.ones((2, 2)), np.zeros((2, 3), np.int64), np.ones((2, 4)), axis=1)
