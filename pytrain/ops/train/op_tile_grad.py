"""TileGrad: the gradient of Tile."""
from __future__ import annotations

from typing import List

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.common import int_list
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("TileGrad", domain=PYTRAIN_DOMAIN)
def tile_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, repeats: np.ndarray) -> tuple:
    """dX = the sum of dY's tiles: Y viewed as (r0, d0, r1, d1, ...) summed over the r axes."""
    reps = int_list("TileGrad", "repeats", repeats)
    if len(reps) != X.ndim:
        raise KernelError("TileGrad node %r: %d repeats for X of rank %d" % (ctx.node_name, len(reps), X.ndim))
    split: List[int] = []
    for r, d in zip(reps, X.shape):
        split += [r, d]
    dX = np.sum(dY.reshape(split), axis=tuple(range(0, 2 * X.ndim, 2)))
    return (np.asarray(dX, dtype=dY.dtype).reshape(X.shape),)
