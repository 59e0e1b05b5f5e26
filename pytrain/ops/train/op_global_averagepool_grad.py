"""GlobalAveragePoolGrad: the gradient of GlobalAveragePool."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("GlobalAveragePoolGrad", domain=PYTRAIN_DOMAIN)
def global_averagepool_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray) -> tuple:
    """dX = dY (N, C, 1, ...) broadcast over X's spatial axes, divided by their element count."""
    count = 1
    for d in X.shape[2:]:
        count *= d
    dX = np.empty(X.shape, dtype=dY.dtype)
    dX[...] = dY * (1.0 / max(count, 1))
    return (dX,)
