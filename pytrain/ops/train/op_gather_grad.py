"""GatherGrad: the gradient of Gather (an embedding lookup's backward)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import norm_axis


@kernel("GatherGrad", domain=PYTRAIN_DOMAIN)
def gather_grad(ctx: OpContext, dY: np.ndarray, indices: np.ndarray, X: np.ndarray, *,
                axis: int = 0) -> tuple:
    """dX = zeros like X, with dY scatter-added along ``axis`` at ``indices`` (repeats accumulate)."""
    a = norm_axis(axis, X.ndim, "GatherGrad axis")
    n = X.shape[a]
    idx = np.asarray(indices).astype(np.int64, copy=False)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise KernelError("GatherGrad node %r: indices must lie in [%d, %d) for axis %d of X %s"
                          % (ctx.node_name, -n, n, a, X.shape))
    idx = np.where(idx < 0, idx + n, idx).astype(np.intp, copy=False).ravel()  # wasm32: int32 indices
    # Gather output = X[:, ..., idx, ...]: bring the gathered axis to the front, one row per index
    rows = np.moveaxis(dY.reshape(X.shape[:a] + (idx.size,) + X.shape[a + 1:]), a, 0)
    inner = int(np.prod(rows.shape[1:]))
    # Sum the rows of each distinct index with one bincount over (index, element) pairs: ten
    # times faster than np.add.at in older numpy (the browser's 1.17), summed in float64 so
    # repeated indices lose no precision, and sized by the distinct indices, not the whole table.
    used, slot = np.unique(idx, return_inverse=True)
    flat = (slot.astype(np.intp)[:, None] * inner + np.arange(inner, dtype=np.intp)).ravel()
    sums = np.bincount(flat, weights=rows.reshape(idx.size, inner).ravel(), minlength=used.size * inner)
    dX = np.zeros((n,) + rows.shape[1:], dtype=dY.dtype)
    dX[used] = sums.reshape((used.size,) + rows.shape[1:])
    return (np.ascontiguousarray(np.moveaxis(dX, 0, a)),)
