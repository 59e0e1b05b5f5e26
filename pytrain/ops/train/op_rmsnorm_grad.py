"""RMSNormalizationGrad: the backward of ONNX RMSNormalization."""
from __future__ import annotations

import numpy as np

from pytrain.base import dtypes
from pytrain.ops.normalization._standardize import standardize_backward
from pytrain.ops.normalization.op_rmsnorm import rms_stats
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import sum_to_shape


@kernel("RMSNormalizationGrad", domain=PYTRAIN_DOMAIN)
def rmsnorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray, *, axis: int = -1,
                 epsilon: float = 1e-5, stash_type: int = dtypes.FLOAT) -> tuple:
    """inv_rms recomputed from X (the forward op saves nothing); xhat = X * inv_rms, g = dY * scale:
    dX = inv_rms * (g - xhat * mean(g * xhat)) over the normalised axes,
    dScale = dY * xhat summed to scale's (broadcastable) shape."""
    xhat, inv_rms, axes = rms_stats("RMSNormalizationGrad", X, scale, axis, epsilon, stash_type)
    dX = dScale = None
    if ctx.wants(0):
        dX = standardize_backward(dY * scale, xhat, inv_rms, axes, center=False).astype(X.dtype, copy=False)
    if ctx.wants(1):
        dScale = sum_to_shape(dY * xhat, scale.shape).astype(scale.dtype, copy=False)
    return (dX, dScale)
