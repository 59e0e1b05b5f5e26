"""Mish and Softsign: smooth activations with no attributes."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


@kernel("Mish")
def mish(ctx, X):
    # x * tanh(softplus(x)), softplus(x) = max(x, 0) + log1p(exp(-|x|)) (finite for any finite x)
    t = X.dtype.type
    sp = np.maximum(X, t(0)) + np.log1p(np.exp(-np.abs(X)))
    with np.errstate(invalid="ignore"):  # -inf * tanh(0) is NaN, as in onnxruntime
        return (np.asarray(X * np.tanh(sp), dtype=X.dtype),)


@kernel("Softsign")
def softsign(ctx, X):
    # x / (1 + |x|)
    with np.errstate(invalid="ignore"):  # inf / inf is NaN, as in onnxruntime and torch
        return (np.asarray(X / (X.dtype.type(1) + np.abs(X)), dtype=X.dtype),)
