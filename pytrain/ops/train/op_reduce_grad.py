"""ReduceGrad: the gradient of ReduceSum and ReduceMean."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import expand_reduced, reduce_axes


@kernel("ReduceGrad", domain=PYTRAIN_DOMAIN)
def reduce_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, axes_input: Optional[np.ndarray] = None, *,
                mode: str = "sum", axes: Optional[Sequence[int]] = None, keepdims: int = 1,
                noop_with_empty_axes: int = 0) -> tuple:
    """dX = dY broadcast back over the reduced axes of X (divided by their element count for "mean")."""
    if mode not in ("sum", "mean"):
        raise KernelError("ReduceGrad node %r: mode must be 'sum' or 'mean', got %r" % (ctx.node_name, mode))
    red = reduce_axes(X.ndim, axes_input, axes, noop_with_empty_axes, "ReduceGrad axes")
    if red is None:
        return (dY,)
    g = expand_reduced(dY, red, keepdims)
    if mode == "mean":
        count = 1
        for a in red:
            count *= X.shape[a]
        g = g * (1.0 / max(count, 1))
    # A real array, not a read-only broadcast view: in-place consumers (optimizers) may write it.
    dX = np.empty(X.shape, dtype=dY.dtype)
    dX[...] = g
    return (dX,)
