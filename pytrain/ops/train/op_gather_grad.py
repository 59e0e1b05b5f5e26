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
    idx = np.where(idx < 0, idx + n, idx).astype(np.intp, copy=False)  # wasm32 indexes with int32
    dX = np.zeros(X.shape, dtype=dY.dtype)
    # Gather output = X[:, ..., idx, ...], so the same index tuple scatters dY back.
    np.add.at(dX, (slice(None),) * a + (idx,), dY)
    return (dX,)
