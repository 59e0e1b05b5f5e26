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
        # each (n, c) row summed by einsum's contiguous loop, then divided as the mean does: numpy's
        # reduction over a short last axis pays per row (MobileNetV3's squeeze-excite, 8x288 rows of 12:
        # 87 -> 30 us). Unlike a product with a 1/L vector (BLAS gemv), a row's sum is the same whatever
        # the batch around it or the row's address, so a sample's features do not depend on its batch
        n, c = X.shape[0], X.shape[1]
        rows = X.reshape(n * c, -1)
        mean = np.einsum("ij->i", rows) / X.dtype.type(rows.shape[1])
        return (mean.astype(X.dtype, copy=False).reshape((n, c) + (1,) * len(axes)),)
    return (np.asarray(np.mean(X, axis=axes, keepdims=True), dtype=X.dtype),)


@kernel("GlobalMaxPool")
def global_max_pool(ctx, X):
    axes = _spatial_axes("GlobalMaxPool", X)
    return (np.asarray(np.max(X, axis=axes, keepdims=True), dtype=X.dtype),)
