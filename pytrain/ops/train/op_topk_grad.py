"""TopKGrad: the gradient of TopK's Values output."""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import norm_axis


@kernel("TopKGrad", domain=PYTRAIN_DOMAIN)
def topk_grad(ctx: OpContext, dValues: np.ndarray, Indices: np.ndarray, X: np.ndarray, *, axis: int = -1) -> tuple:
    """dX: zeros like X with dValues written at Indices along ``axis`` (the indices of one slice
    are distinct, so writing equals scatter-adding); the elements not selected get 0."""
    a = norm_axis(axis, X.ndim, "TopKGrad axis")
    if dValues.shape != Indices.shape:
        raise KernelError("TopKGrad node %r: dValues shape %s differs from Indices shape %s"
                          % (ctx.node_name, dValues.shape, Indices.shape))
    dX = np.zeros(X.shape, dtype=dValues.dtype)
    np.put_along_axis(dX, Indices.astype(np.int64, copy=False), dValues, axis=a)
    return (dX,)
