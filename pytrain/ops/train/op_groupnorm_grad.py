"""GroupNormalizationGrad: the backward of ONNX GroupNormalization (both scale/bias forms)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.base import dtypes
from pytrain.ops.normalization._standardize import standardize_backward
from pytrain.ops.normalization.op_groupnorm import check_groups, group_stats, per_channel
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("GroupNormalizationGrad", domain=PYTRAIN_DOMAIN)
def groupnorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray, *,
                   num_groups: Optional[int] = None, epsilon: float = 1e-5,
                   stash_type: int = dtypes.FLOAT) -> tuple:
    """Statistics recomputed from X per (instance, group), X viewed as (N, G, C/G * D1 * ...).

    g = dY * scale (per channel, or per group for the opset-18 form, told apart by scale's shape);
    dX = inv_std * (g - mean(g) - xhat * mean(g * xhat)) within each group;
    dScale = sum dY * xhat and dBias = sum dY, over the batch and each channel's (or group's) values.
    """
    num_groups = check_groups("GroupNormalizationGrad", X, num_groups)
    xhat, _, inv_std = group_stats(X, num_groups, epsilon, stash_type)
    n, c = X.shape[0], X.shape[1]
    channel = per_channel(scale, X)
    if channel:  # views with one axis per channel, and one per group
        dyc = dY.reshape(n, c, -1)
        xhat_c = xhat.reshape(n, c, -1)
        g = (dyc * scale.reshape(1, c, 1)).reshape(n, num_groups, -1)
    else:
        g = dY.reshape(n, num_groups, -1) * scale.reshape(1, num_groups, 1)
    dX = dScale = dB = None
    if ctx.wants(0):
        dX = standardize_backward(g, xhat, inv_std, (2,)).reshape(X.shape).astype(X.dtype, copy=False)
    if ctx.wants(1):
        prod = dyc * xhat_c if channel else dY.reshape(n, num_groups, -1) * xhat
        dScale = np.sum(prod, axis=(0, 2)).astype(scale.dtype, copy=False)
    if ctx.wants(2):
        dB = np.sum(dY.reshape(n, scale.shape[0], -1), axis=(0, 2)).astype(scale.dtype, copy=False)
    return (dX, dScale, dB)
