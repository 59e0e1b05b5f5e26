"""ReluGrad: the gradient of Relu, read from its output."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("ReluGrad", domain=PYTRAIN_DOMAIN)
def relu_grad(ctx: OpContext, dY: np.ndarray, Y: np.ndarray) -> tuple:
    """dX = dY where Y > 0 else 0."""
    # where (not dY * mask) so an inf/nan upstream gradient does not leak through a dead unit.
    return (np.where(Y > 0, dY, np.zeros((), dY.dtype)),)
