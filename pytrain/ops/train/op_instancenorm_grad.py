"""InstanceNormalizationGrad: the backward of ONNX InstanceNormalization."""
from __future__ import annotations

import numpy as np

from pytrain.ops.normalization._standardize import standardize_backward
from pytrain.ops.normalization.op_instancenorm import instance_stats
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.op_batchnorm_training import channel_view


@kernel("InstanceNormalizationGrad", domain=PYTRAIN_DOMAIN)
def instancenorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray, *,
                      epsilon: float = 1e-5) -> tuple:
    """The statistics (per instance and channel, over the spatial axes) are recomputed from X:
    the forward op has no outputs to save them in. With xhat = (X - mean) * inv_std:
    dX = inv_std * (g - mean(g) - xhat * mean(g * xhat)) with g = dY * scale[c] (means over the
    spatial axes), dScale = sum dY * xhat and dB = sum dY over every axis but the channel axis 1.
    """
    xhat, _, inv_std = instance_stats(X, epsilon)
    spatial = tuple(range(2, X.ndim))
    outer = (0,) + spatial
    dX = dScale = dB = None
    if ctx.wants(0):
        g = dY * channel_view(scale, X.ndim)
        dX = standardize_backward(g, xhat, inv_std, spatial).astype(X.dtype, copy=False)
    if ctx.wants(1):
        dScale = np.sum(dY * xhat, axis=outer).astype(scale.dtype, copy=False)
    if ctx.wants(2):
        dB = np.sum(dY, axis=outer).astype(scale.dtype, copy=False)
    return (dX, dScale, dB)
