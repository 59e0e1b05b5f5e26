"""ScatterNDGrad: the gradients of ScatterND for data and updates."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.shape._indices import REDUCTIONS, nd_positions
from pytrain.ops.train._scatter import scatter_grads


@kernel("ScatterNDGrad", domain=PYTRAIN_DOMAIN)
def scatter_nd_grad(ctx: OpContext, dY: np.ndarray, indices: np.ndarray, data: Optional[np.ndarray] = None,
                    updates: Optional[np.ndarray] = None, Y: Optional[np.ndarray] = None, *,
                    reduction: str = "none") -> tuple:
    """(dData, dUpdates); data, updates and Y are needed only for reduction mul, max and min."""
    red = reduction.decode() if isinstance(reduction, bytes) else reduction
    if red not in REDUCTIONS:
        raise KernelError("ScatterNDGrad node %r: unknown reduction %r" % (ctx.node_name, red))
    pos = nd_positions("ScatterNDGrad", dY.shape, indices)
    return scatter_grads("ScatterNDGrad", ctx.node_name, dY, pos, red, data, updates, Y,
                         ctx.wants(0), ctx.wants(1))
