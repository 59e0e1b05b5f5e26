"""GlobalAveragePool and GlobalMaxPool: reduce every spatial axis of (N, C, d1, ...) to 1."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.registry import kernel


def _spatial_axes(op: str, X: np.ndarray) -> tuple:
    if X.ndim < 3:
        raise InputError("%s: input must be (N, C, d1, ...), got shape %s" % (op, X.shape))
    return tuple(range(2, X.ndim))


@kernel("GlobalAveragePool")
def global_average_pool(ctx, X):
    axes = _spatial_axes("GlobalAveragePool", X)
    return (np.asarray(np.mean(X, axis=axes, keepdims=True), dtype=X.dtype),)


@kernel("GlobalMaxPool")
def global_max_pool(ctx, X):
    axes = _spatial_axes("GlobalMaxPool", X)
    return (np.asarray(np.max(X, axis=axes, keepdims=True), dtype=X.dtype),)
