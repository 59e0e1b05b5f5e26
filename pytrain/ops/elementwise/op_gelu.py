"""Gelu (ONNX opset 20, and the training model's node for the exporters' GELU chains: pytrain.autodiff.gelu_forms):
the exact erf form or the tanh form, in the input's float type, in place on one fresh array (a pass allocating
a megabyte temporary costs more than its arithmetic: each is fresh pages from the system); the tanh form through
one exponential (numpy's float32 exp is 4x its tanh)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from pytrain.errors import GraphError
from pytrain.ops.registry import PYTRAIN_DOMAIN, kernel
from pytrain.ops.special import erf

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_CUBIC = 0.044715


def approximate_form(approximate: object) -> Optional[str]:
    """'none' or 'tanh' from Gelu's and GeluGrad's ``approximate`` attribute (bytes or str), None for any other
    value (the numpy kernels refuse it by name; the wasm and WebGPU routes leave it to them)."""
    if isinstance(approximate, bytes):
        approximate = approximate.decode("utf-8", "replace")
    return approximate if approximate in ("none", "tanh") else None  # type: ignore[return-value]


def form(approximate: object, where: str) -> str:
    """:func:`approximate_form`, anything else refused naming ``where``."""
    found = approximate_form(approximate)
    if found is None:
        shown = approximate.decode("utf-8", "replace") if isinstance(approximate, bytes) else approximate
        raise GraphError("%s: approximate must be 'none' or 'tanh', got %r" % (where, shown))
    return found


@kernel("Gelu")
def gelu(ctx, X: np.ndarray, *, approximate: object = "none") -> tuple:
    """x * Phi(x) (erf form) or x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), the constants in X's type."""
    t = X.dtype.type
    if form(approximate, "Gelu") == "none":
        y = erf(X * t(_INV_SQRT2))
    else:   # x (1 + tanh(u)) / 2 = x / (1 + e^(-2u)), u = (x + ((0.044715 x) x) x) sqrt(2/pi): one exp, no tanh
        y = np.multiply(X, t(_CUBIC))
        y *= X
        y *= X
        y += X
        y *= t(-2.0 * _SQRT_2_OVER_PI)
        with np.errstate(over="ignore"):   # e^(-2u) = inf for u < -44: x / inf is the -0 it should be
            np.exp(y, out=y)
        y += t(1)
        np.divide(X, y, out=y)
        return (y,)
    y += t(1)
    y *= t(0.5)
    y *= X
    return (np.asarray(y, dtype=X.dtype),)


#: the training model's node for the exporters' tanh-GELU chain (pytrain.autodiff.gelu_forms): ONNX Gelu's
#: meaning, at any opset the model imports
kernel("Gelu", domain=PYTRAIN_DOMAIN)(gelu)
