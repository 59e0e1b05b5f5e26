"""Activations: Relu, LeakyRelu, Sigmoid, Tanh, Softplus (numerically stable forms); Gelu is op_gelu."""
from __future__ import annotations

import numpy as np

from pytrain.ops.elementwise.op_clip import clip_into
from pytrain.ops.registry import kernel


@kernel("Relu")
def relu(ctx, X):
    if X.dtype.kind == "f" and X.ndim:
        # a clip to [0, inf] (clip_into: numpy 2's clip is one vectorised loop, 2.5x faster than its
        # maximum over DBNet's 2x16x80x80); the same values, a -0.0 staying -0.0 where maximum gives 0.0
        t = X.dtype.type
        return (clip_into(np.empty_like(X), X, t(0), t(np.inf)),)
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

