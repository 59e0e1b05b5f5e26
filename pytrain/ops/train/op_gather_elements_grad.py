"""GatherElementsGrad: the gradient of GatherElements (torch.gather's backward)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.shape._indices import element_positions
from pytrain.ops.train._scatter import add_at_positions


@kernel("GatherElementsGrad", domain=PYTRAIN_DOMAIN)
def gather_elements_grad(ctx: OpContext, dY: np.ndarray, indices: np.ndarray, X: np.ndarray, *,
                         axis: int = 0) -> tuple:
    """dX = zeros like X with dY scatter-added at the elements GatherElements read (repeats accumulate)."""
    pos = element_positions("GatherElementsGrad", X.shape, indices, axis)
    if dY.shape != pos.shape:
        raise KernelError("GatherElementsGrad node %r: dY shape %s is not the indices shape %s"
                          % (ctx.node_name, dY.shape, pos.shape))
    return (add_at_positions(dY, pos, X.shape),)
