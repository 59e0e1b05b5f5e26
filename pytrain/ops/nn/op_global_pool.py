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
    if X.dtype in (np.float32, np.float64) and X.size:
        # one matrix-vector product, rows (N*C) times 1/L: numpy's reduction over a short last axis
        # pays per row (MobileNetV3's squeeze-excite, 8x288 rows of 12: 80 -> 12 us); a NaN or
        # infinity in a row gives that row NaN or infinity, as the mean's sum does
        n, c = X.shape[0], X.shape[1]
        rows = X.reshape(n * c, -1)
        mean = np.matmul(rows, np.full((rows.shape[1],), 1.0 / rows.shape[1], dtype=X.dtype))
        return (mean.reshape((n, c) + (1,) * len(axes)),)
    return (np.asarray(np.mean(X, axis=axes, keepdims=True), dtype=X.dtype),)


@kernel("GlobalMaxPool")
def global_max_pool(ctx, X):
    axes = _spatial_axes("GlobalMaxPool", X)
    return (np.asarray(np.max(X, axis=axes, keepdims=True), dtype=X.dtype),)
