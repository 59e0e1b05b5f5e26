"""GatherNDGrad: the gradient of GatherND (scatter-add of dY where GatherND read)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.shape._indices import batched_nd_positions
from pytrain.ops.train._scatter import add_at_positions


@kernel("GatherNDGrad", domain=PYTRAIN_DOMAIN)
def gather_nd_grad(ctx: OpContext, dY: np.ndarray, indices: np.ndarray, X: np.ndarray, *,
                   batch_dims: int = 0) -> tuple:
    """dX = zeros like X with dY added at every element GatherND read (repeats accumulate)."""
    pos = batched_nd_positions("GatherNDGrad", X.shape, indices, batch_dims)
    if dY.shape != pos.shape:
        raise KernelError("GatherNDGrad node %r: dY shape %s is not GatherND's output shape %s"
                          % (ctx.node_name, dY.shape, pos.shape))
    return (add_at_positions(dY, pos, X.shape),)
