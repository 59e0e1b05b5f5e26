"""ReduceNormGrad: the gradient of ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and
ReduceLogSumExp, whose dX depends on X (and on the reduction's result Y)."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import expand_reduced, reduce_axes

MODES = ("l1", "l2", "sum_square", "log_sum", "log_sum_exp")


@kernel("ReduceNormGrad", domain=PYTRAIN_DOMAIN)
def reduce_norm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, Y: Optional[np.ndarray] = None,
                     axes_input: Optional[np.ndarray] = None, *, mode: str = "l2",
                     axes: Optional[Sequence[int]] = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> tuple:
    """dX = dY (broadcast back over the reduced axes) times the derivative of the reduction:
    l1: sign(X); l2: X / Y (0 where Y = 0, as torch.linalg.vector_norm); sum_square: 2 X;
    log_sum: 1 / sum(X); log_sum_exp: exp(X - Y), the softmax of X over the group."""
    if mode not in MODES:
        raise KernelError("ReduceNormGrad node %r: mode must be one of %s, got %r" % (ctx.node_name, MODES, mode))
    if mode in ("l2", "log_sum_exp") and Y is None:
        raise KernelError("ReduceNormGrad node %r: mode %r needs the reduction's output Y" % (ctx.node_name, mode))
    red = reduce_axes(X.ndim, axes_input, axes, noop_with_empty_axes, "ReduceNormGrad axes")
    red = () if red is None else red  # no-op: a reduction over no axis, the element-wise part remains
    g = expand_reduced(dY, red, keepdims)
    x = X.astype(dY.dtype, copy=False)
    zero = np.zeros((), dY.dtype)
    if mode == "l1":
        dX = g * np.sign(x)
    elif mode == "sum_square":
        dX = g * (x + x)
    elif mode == "l2":
        y = expand_reduced(Y, red, keepdims).astype(dY.dtype, copy=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            dX = np.where(y == 0, zero, g * x / y)
    elif mode == "log_sum":
        s = np.sum(x, axis=red, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            dX = g / s
    else:
        y = expand_reduced(Y, red, keepdims).astype(dY.dtype, copy=False)
        with np.errstate(invalid="ignore", over="ignore"):
            # a group of only -inf has Y = -inf: no element carries weight, the gradient is 0
            dX = np.where(np.isneginf(y), zero, g * np.exp(x - y))
    out = np.empty(X.shape, dtype=dY.dtype)  # a real array, never a broadcast view
    out[...] = dX
    return (out,)
