"""Add, Sub, Mul, Div, Pow: element-wise arithmetic with numpy (multidirectional) broadcasting (before
opset 7 the ``broadcast``/``axis`` attributes: a plan aligns B first, :mod:`.legacy_broadcast`)."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


def _in_dtype(res, like: np.ndarray) -> np.ndarray:
    # ufuncs on 0-d inputs return numpy scalars; ONNX wants A's type even if numpy would promote.
    return np.asarray(res, dtype=like.dtype)


@kernel("Add")
def add(ctx, A, B):
    return (_in_dtype(np.add(A, B), A),)


@kernel("Sub")
def sub(ctx, A, B):
    return (_in_dtype(np.subtract(A, B), A),)


@kernel("Mul")
def mul(ctx, A, B):
    return (_in_dtype(np.multiply(A, B), A),)


@kernel("Div")
def div(ctx, A, B):
    if A.dtype.kind in "iu":
        # ONNX (like C) truncates integer quotients toward zero; numpy floors. x/0 gives 0.
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.floor_divide(A, B)
            if A.dtype.kind == "i":
                inexact = (np.remainder(A, B) != 0) & ((A < 0) != (B < 0))
                q = q + inexact.astype(q.dtype)
        return (_in_dtype(q, A),)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (_in_dtype(np.true_divide(A, B), A),)


@kernel("Pow")
def pow_(ctx, X, Y):
    # The exponent may have another type than X (opset >= 12); the result has X's type.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if X.dtype.kind == "f":
            return (_in_dtype(np.power(X, Y.astype(X.dtype, copy=False)), X),)
        if Y.dtype.kind in "iu" and not np.any(Y < 0):
            return (_in_dtype(np.power(X, Y.astype(X.dtype, copy=False)), X),)
        r = np.power(X.astype(np.float64), Y.astype(np.float64))
        return (_in_dtype(r, X),)
