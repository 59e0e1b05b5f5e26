"""BatchNormGrad: the backward of training-mode batch normalisation."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.op_batchnorm_training import channel_view


@kernel("BatchNormGrad", domain=PYTRAIN_DOMAIN)
def batchnorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray,
                   saved_mean: np.ndarray, saved_invstd: np.ndarray) -> tuple:
    """dB = sum dY, dScale = sum dY * xhat, dX = scale * invstd * (dY - mean(dY) - xhat * mean(dY * xhat)).

    Sums and means run over every axis but the channel axis 1; xhat = (X - saved_mean) * saved_invstd.
    """
    axes = (0,) + tuple(range(2, X.ndim))
    n = X.size // X.shape[1]
    xhat = (X - channel_view(saved_mean, X.ndim)) * channel_view(saved_invstd, X.ndim)
    dB = np.sum(dY, axis=axes)
    dScale = np.sum(dY * xhat, axis=axes)
    dX = None
    if ctx.wants(0):
        k = channel_view(scale * saved_invstd, X.ndim)
        dX = k * (dY - channel_view(dB * (1.0 / n), X.ndim) - xhat * channel_view(dScale * (1.0 / n), X.ndim))
        dX = dX.astype(X.dtype, copy=False)
    return (dX, dScale if ctx.wants(1) else None, dB if ctx.wants(2) else None)
