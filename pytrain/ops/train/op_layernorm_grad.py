"""LayerNormalizationGrad: the backward of ONNX LayerNormalization from its saved Mean/InvStdDev."""
from __future__ import annotations

import numpy as np

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
        Mean = np.mean(X, axis=norm_axes, keepdims=True)
        var = np.mean(np.square(X - Mean), axis=norm_axes, keepdims=True)
        InvStdDev = 1 / np.sqrt(var + X.dtype.type(epsilon))
    xhat = (X - Mean) * InvStdDev
    dX = dScale = dB = None
    if ctx.wants(0):
        g = dY * Scale
        n = 1
        for d in X.shape[a:]:
            n *= d
        inv_n = 1.0 / max(n, 1)
        mg = np.sum(g, axis=norm_axes, keepdims=True) * inv_n
        mgx = np.sum(g * xhat, axis=norm_axes, keepdims=True) * inv_n
        dX = (InvStdDev * (g - mg - xhat * mgx)).astype(X.dtype, copy=False)
    if ctx.wants(1):
        dScale = sum_to_shape(dY * xhat, Scale.shape).astype(Scale.dtype, copy=False)
    if ctx.wants(2):
        # dB has the shape of the bias input, which broadcasts like Scale.
        dB = sum_to_shape(dY, Scale.shape).astype(Scale.dtype, copy=False)
    return (dX, dScale, dB)
