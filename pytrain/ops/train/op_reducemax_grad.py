"""ReduceMaxGrad: the gradient of ReduceMax."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import expand_reduced, reduce_axes


@kernel("ReduceMaxGrad", domain=PYTRAIN_DOMAIN)
def reducemax_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, Y: np.ndarray,
                   axes_input: Optional[np.ndarray] = None, *, axes: Optional[Sequence[int]] = None,
                   keepdims: int = 1, noop_with_empty_axes: int = 0) -> tuple:
    """dX = dY shared evenly among the elements equal to the max of their group (torch.amax's rule)."""
    red = reduce_axes(X.ndim, axes_input, axes, noop_with_empty_axes, "ReduceMaxGrad axes")
    if red is None:
        return (dY,)
    g = expand_reduced(dY, red, keepdims)
    hit = X == expand_reduced(Y, red, keepdims)
    count = np.sum(hit, axis=red, keepdims=True)
    share = g / np.maximum(count, 1).astype(dY.dtype)
    return (np.where(hit, share, np.zeros((), dY.dtype)),)
