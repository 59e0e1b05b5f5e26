"""BatchNormGrad: the backward of training-mode batch normalisation."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.op_batchnorm_training import channel_sums, channel_view


@kernel("BatchNormGrad", domain=PYTRAIN_DOMAIN)
def batchnorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray,
                   saved_mean: np.ndarray, saved_invstd: np.ndarray) -> tuple:
    """dB = sum dY, dScale = sum dY * xhat, dX = scale * invstd * (dY - mean(dY) - xhat * mean(dY * xhat)).

    Sums and means run over every axis but the channel axis 1; xhat = (X - saved_mean) * saved_invstd.
    """
    n = X.size // X.shape[1]
    xhat = X - channel_view(saved_mean, X.ndim)
    xhat *= channel_view(saved_invstd, X.ndim)
    dB = channel_sums(dY)
    prod = dY * xhat
    dScale = channel_sums(prod)
    dX = None
    if ctx.wants(0):
        k = scale * saved_invstd
        # k * (dY - dB/n - xhat * dScale/n), the products in place in ``prod``'s buffer
        np.multiply(xhat, channel_view(k * dScale * (1.0 / n), X.ndim), out=prod)
        dX = np.multiply(dY, channel_view(k, X.ndim))
        dX -= prod
        dX -= channel_view(k * dB * (1.0 / n), X.ndim)
        dX = dX.astype(X.dtype, copy=False)
    return (dX, dScale if ctx.wants(1) else None, dB if ctx.wants(2) else None)
