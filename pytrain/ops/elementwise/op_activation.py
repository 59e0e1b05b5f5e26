"""Activations: Relu, LeakyRelu, Sigmoid, Tanh, Softplus, Gelu (numerically stable forms)."""
from __future__ import annotations

import math

import numpy as np

from pytrain.errors import GraphError
from pytrain.ops.special import erf
from pytrain.ops.registry import kernel


@kernel("Relu")
def relu(ctx, X):
    return (np.asarray(np.maximum(X, X.dtype.type(0)), dtype=X.dtype),)


@kernel("LeakyRelu")
def leaky_relu(ctx, X, *, alpha=0.01):
    return (np.asarray(np.where(X >= 0, X, X * X.dtype.type(alpha)), dtype=X.dtype),)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function without overflow, exact in the tails: exp(min(x, 0)) / (1 + exp(-|x|))
    (exp never sees a positive argument; cheaper than selecting between two branches)."""
    x = np.asarray(x)
    num = np.asarray(np.minimum(x, x.dtype.type(0)))  # (a 0-d input gives a numpy scalar)
    np.exp(num, out=num)
    den = np.asarray(np.abs(x))
    np.negative(den, out=den)
    np.exp(den, out=den)
    den += x.dtype.type(1)
    num /= den
    return num


@kernel("Sigmoid")
def sigmoid_op(ctx, X):
    return (sigmoid(X),)


@kernel("Tanh")
def tanh(ctx, X):
    return (np.asarray(np.tanh(X), dtype=X.dtype),)


@kernel("Softplus")
def softplus(ctx, X):
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): finite for any finite x.
    t = np.asarray(np.abs(X))
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    t += np.maximum(X, X.dtype.type(0))
    return (t,)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@kernel("Gelu")
def gelu(ctx, X, *, approximate="none"):
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    t = X.dtype.type
    if approximate == "none":
        y = X * (t(0.5) * (t(1) + erf(X * t(1 / math.sqrt(2.0)))))
    elif approximate == "tanh":
        inner = (X + t(0.044715) * X * X * X) * t(_SQRT_2_OVER_PI)
        y = X * (t(0.5) * (t(1) + np.tanh(inner)))
    else:
        raise GraphError("Gelu: approximate must be 'none' or 'tanh', got %r" % (approximate,))
    return (np.asarray(y, dtype=X.dtype),)
