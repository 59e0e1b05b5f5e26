"""Element-wise unary math: Neg, Abs, Sqrt, Exp, Log, Reciprocal, Sign, Floor, Ceil."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


def _same(res, like: np.ndarray) -> np.ndarray:
    # ufuncs on 0-d arrays return numpy scalars; kernels always return ndarrays in X's dtype.
    return np.asarray(res, dtype=like.dtype)


@kernel("Neg")
def neg(ctx, X):
    return (_same(np.negative(X), X),)


@kernel("Abs")
def abs_(ctx, X):
    return (_same(np.abs(X), X),)


@kernel("Sqrt")
def sqrt(ctx, X):
    with np.errstate(invalid="ignore"):  # sqrt(-1) is NaN, as ONNX says
        return (_same(np.sqrt(X), X),)


@kernel("Exp")
def exp(ctx, X):
    with np.errstate(over="ignore"):
        return (_same(np.exp(X), X),)


@kernel("Log")
def log(ctx, X):
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf, log(-1) = NaN
        return (_same(np.log(X), X),)


@kernel("Reciprocal")
def reciprocal(ctx, X):
    with np.errstate(divide="ignore"):
        return (_same(np.true_divide(1, X), X),)


@kernel("Sign")
def sign(ctx, X):
    return (_same(np.sign(X), X),)


@kernel("Floor")
def floor(ctx, X):
    return (_same(np.floor(X), X),)


@kernel("Ceil")
def ceil(ctx, X):
    return (_same(np.ceil(X), X),)
