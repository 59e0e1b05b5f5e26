"""GeluGrad: the gradient of Gelu, exact (erf) or tanh-approximated."""
from __future__ import annotations

import math

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.special import erf

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


@kernel("GeluGrad", domain=PYTRAIN_DOMAIN)
def gelu_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, *, approximate: str = "none") -> tuple:
    """dX = dY * d/dx gelu(x).

    "none":  gelu = x * Phi(x), so the derivative is Phi(x) + x * phi(x).
    "tanh":  gelu = x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3), so the derivative is
             (1 + t)/2 + x/2 * (1 - t^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2) with t = tanh(u).
    """
    if approximate == "none":
        cdf = 0.5 * (1.0 + erf(X * _INV_SQRT2))
        pdf = np.exp(-0.5 * X * X) * _INV_SQRT_2PI
        d = cdf + X * pdf
    elif approximate == "tanh":
        x2 = X * X
        t = np.tanh(_SQRT_2_OVER_PI * X * (1.0 + _CUBIC * x2))
        d = 0.5 * (1.0 + t) + 0.5 * X * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * x2)
    else:
        raise KernelError("GeluGrad node %r: approximate must be 'none' or 'tanh', got %r"
                          % (ctx.node_name, approximate))
    return ((dY * d).astype(dY.dtype, copy=False),)
