"""GeluGrad: the gradient of Gelu, exact (erf) or tanh-approximated, in place on two fresh arrays (op_gelu says why)."""
from __future__ import annotations

import math

import numpy as np

from pytrain.ops.elementwise.op_gelu import form
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.special import erf

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


@kernel("GeluGrad", domain=PYTRAIN_DOMAIN)
def gelu_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, *, approximate: object = "none") -> tuple:
    """dX = dY * d/dx gelu(x).

    "none":  gelu = x * Phi(x), so the derivative is Phi(x) + x * phi(x).
    "tanh":  gelu = x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3), so the derivative is
             (1 + t)/2 + x/2 * (1 - t^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2) with t = tanh(u).
    """
    if form(approximate, "GeluGrad node %r" % (ctx.node_name,)) == "none":
        d = erf(X * _INV_SQRT2)   # Phi(x) = (1 + erf(x / sqrt 2)) / 2
        d += 1.0
        d *= 0.5
        s = np.multiply(X, X)    # x phi(x) = x e^(-x^2/2) / sqrt(2 pi)
        s *= -0.5
        np.exp(s, out=s)
        s *= _INV_SQRT_2PI
        s *= X
    else:   # with s = (1 + t)/2 = 1 / (1 + e^(-2u)) (one exp, no tanh): (1 - t^2)/2 = 2 s (1 - s)
        x2 = np.multiply(X, X)
        d = np.multiply(x2, _CUBIC)   # -2u = -2 sqrt(2/pi) x (1 + 0.044715 x^2)
        d += 1.0
        d *= X
        d *= -2.0 * _SQRT_2_OVER_PI
        with np.errstate(over="ignore"):   # e^(-2u) = inf for u < -44: s = 0
            np.exp(d, out=d)
        d += 1.0
        np.reciprocal(d, out=d)            # s
        s = np.subtract(1.0, d)            # 2 sqrt(2/pi) x s (1 - s) (1 + 3 * 0.044715 x^2)
        s *= d
        s *= X
        s *= 2.0 * _SQRT_2_OVER_PI
        x2 *= 3.0 * _CUBIC
        x2 += 1.0
        s *= x2
    d += s
    d = np.multiply(d, dY, out=d) if d.dtype == np.result_type(d, dY) else d * dY
    return (d.astype(dY.dtype, copy=False),)
