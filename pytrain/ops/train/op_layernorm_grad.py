"""LayerNormalizationGrad: the backward of ONNX LayerNormalization from its saved Mean/InvStdDev."""
from __future__ import annotations

import numpy as np

from pytrain.ops.normalization._standardize import standardize, standardize_backward
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import norm_axis, sum_to_shape


@kernel("LayerNormalizationGrad", domain=PYTRAIN_DOMAIN)
def layernorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, Scale: np.ndarray,
                   Mean: np.ndarray, InvStdDev: np.ndarray, *, axis: int = -1,
                   epsilon: float = 1e-5) -> tuple:
    """Normalised axes are ``axis`` .. last; Mean/InvStdDev have X's shape with those axes set to 1.

    With xhat = (X - Mean) * InvStdDev and g = dY * Scale:
    dX = InvStdDev * (g - mean(g) - xhat * mean(g * xhat)) over the normalised axes,
    dScale = dY * xhat and dB = dY, each summed to Scale's (broadcastable) shape.
    When the saved statistics are less precise than X (the default float stash_type with a double
    X), they are recomputed from X (with ``epsilon``) so the gradient keeps X's precision.
    """
    a = norm_axis(axis, X.ndim, "LayerNormalizationGrad axis")
    norm_axes = tuple(range(a, X.ndim))
    if np.dtype(Mean.dtype).itemsize < X.dtype.itemsize or np.dtype(InvStdDev.dtype).itemsize < X.dtype.itemsize:
        xhat, Mean, InvStdDev = standardize(X, norm_axes, epsilon, X.dtype)
    else:
        xhat = (X - Mean) * InvStdDev
    dX = dScale = dB = None
    if ctx.wants(0):
        dX = standardize_backward(dY * Scale, xhat, InvStdDev, norm_axes).astype(X.dtype, copy=False)
    if ctx.wants(1):
        dScale = sum_to_shape(dY * xhat, Scale.shape).astype(Scale.dtype, copy=False)
    if ctx.wants(2):
        # dB has the shape of the bias input, which broadcasts like Scale.
        dB = sum_to_shape(dY, Scale.shape).astype(Scale.dtype, copy=False)
    return (dX, dScale, dB)
