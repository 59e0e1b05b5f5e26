"""GlobalMaxPoolGrad: the gradient of GlobalMaxPool."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("GlobalMaxPoolGrad", domain=PYTRAIN_DOMAIN)
def global_maxpool_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray) -> tuple:
    """dX: each dY[n, c] goes to ONE position of X[n, c], the first maximum in row-major order over
    the spatial axes (a NaN counts as the maximum), as torch's adaptive_max_pool2d / max_pool2d
    backward does; the other positions get 0. (ReduceMax's gradient instead splits dY evenly
    among tied maxima, as torch.amax does.)"""
    n, c = X.shape[0], X.shape[1]
    flat = X.reshape(n, c, -1)
    where = np.argmax(flat, axis=2)  # the first maximum; the first NaN if there is one
    dX = np.zeros(flat.shape, dtype=dY.dtype)
    np.put_along_axis(dX, where[:, :, None], dY.reshape(n, c, 1), axis=2)
    return (dX.reshape(X.shape),)
