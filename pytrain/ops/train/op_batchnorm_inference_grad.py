"""BatchNormInferenceGrad: the backward of BatchNormalization on running statistics (inference
mode, what a frozen backbone in ``eval()`` computes): an affine map per channel."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.op_batchnorm_training import channel_view


@kernel("BatchNormInferenceGrad", domain=PYTRAIN_DOMAIN)
def batchnorm_inference_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray,
                             mean: np.ndarray, var: np.ndarray, *, epsilon: float = 1e-5) -> tuple:
    """Y = scale * (X - mean) * invstd + B with invstd = 1 / sqrt(var + epsilon) fixed, so

    dX = dY * scale * invstd,  dScale = sum dY * (X - mean) * invstd,  dB = sum dY

    (sums over every axis but the channel axis 1). The statistics are constants here: no term
    through a batch mean, unlike BatchNormGrad.
    """
    invstd = 1.0 / np.sqrt(var.astype(np.float64) + float(epsilon))
    axes = (0,) + tuple(range(2, X.ndim))
    dX = dScale = dB = None
    if ctx.wants(0):
        dX = (dY * channel_view((scale * invstd).astype(X.dtype), X.ndim)).astype(X.dtype, copy=False)
    if ctx.wants(1):
        xhat = (X - channel_view(mean.astype(X.dtype), X.ndim)) * channel_view(invstd.astype(X.dtype), X.ndim)
        dScale = np.sum(dY * xhat, axis=axes).astype(scale.dtype, copy=False)
    if ctx.wants(2):
        dB = np.sum(dY, axis=axes).astype(scale.dtype, copy=False)
    return (dX, dScale, dB)
