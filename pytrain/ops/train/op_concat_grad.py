"""ConcatGrad: the gradient of Concat."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import norm_axis


@kernel("ConcatGrad", domain=PYTRAIN_DOMAIN)
def concat_grad(ctx: OpContext, dY: np.ndarray, *Xs: np.ndarray, axis: int) -> tuple:
    """dXi = the piece of dY along ``axis`` that Xi filled (a view of dY; kernels never mutate inputs)."""
    a = norm_axis(axis, dY.ndim, "ConcatGrad axis")
    outs = []
    offset = 0
    for i, X in enumerate(Xs):
        size = X.shape[a]
        if ctx.wants(i):
            index = (slice(None),) * a + (slice(offset, offset + size),)
            outs.append(dY[index])
        else:
            outs.append(None)
        offset += size
    return tuple(outs)
