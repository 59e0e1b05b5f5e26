"""The exponential linear units Elu, Selu, Celu: identity (times a scale) for positive inputs, a
saturating exponential below zero. ``expm1`` keeps small negative inputs exact, and only sees
non-positive arguments (the other branch would overflow for large x)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError
from pytrain.ops.registry import kernel

#: the constants of the SELU paper, as the ONNX spec writes them
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def _expm1_neg(x: np.ndarray) -> np.ndarray:
    """exp(min(x, 0)) - 1."""
    return np.expm1(np.minimum(x, x.dtype.type(0)))


@kernel("Elu")
def elu(ctx, X, *, alpha=1.0):
    # x for x >= 0, alpha * (exp(x) - 1) for x < 0
    t = X.dtype.type
    with np.errstate(invalid="ignore"):  # NaN < 0 (numpy 1.17 warns)
        return (np.asarray(np.where(X < 0, t(alpha) * _expm1_neg(X), X), dtype=X.dtype),)


@kernel("Selu")
def selu(ctx, X, *, alpha=SELU_ALPHA, gamma=SELU_GAMMA):
    # gamma * x for x > 0, gamma * (alpha * exp(x) - alpha) for x <= 0
    t = X.dtype.type
    with np.errstate(invalid="ignore"):
        y = np.where(X > 0, X, t(alpha) * _expm1_neg(X))
    return (np.asarray(t(gamma) * y, dtype=X.dtype),)


@kernel("Celu")
def celu(ctx, X, *, alpha=1.0):
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    if alpha == 0:
        raise GraphError("Celu: attribute alpha must not be 0 (it divides x)")
    t = X.dtype.type
    neg = t(alpha) * np.expm1(np.minimum(X, t(0)) / t(alpha))
    return (np.asarray(np.maximum(X, t(0)) + np.minimum(neg, t(0)), dtype=X.dtype),)
