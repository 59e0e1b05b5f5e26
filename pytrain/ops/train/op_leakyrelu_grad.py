"""LeakyReluGrad: the gradient of LeakyRelu."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("LeakyReluGrad", domain=PYTRAIN_DOMAIN)
def leakyrelu_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, *, alpha: float = 0.01) -> tuple:
    """dX = dY where X > 0 else alpha * dY."""
    # A Python float keeps dY's dtype on both numpy 1.17 and numpy 2.
    return (np.where(X > 0, dY, dY * float(alpha)),)
