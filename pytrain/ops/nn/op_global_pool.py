"""GlobalAveragePool and GlobalMaxPool: reduce every spatial axis of (N, C, d1, ...) to 1."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.registry import kernel

#: up to this many spatial positions per (sample, channel), natively, the mean is one BLAS product
#: with a ones vector: numpy's reduction over a short inner axis pays per row (MobileNetV2's 3x3 head,
#: (16, 1280, 3, 3): 0.29 against 0.034 ms per call, measured natively); longer rows reduce well
#: enough, and a product that large may wake BLAS's threads (seen stalling on this loaded machine)
_PRODUCT_MAX_POSITIONS = 64


def _spatial_axes(op: str, X: np.ndarray) -> tuple:
    if X.ndim < 3:
        raise InputError("%s: input must be (N, C, d1, ...), got shape %s" % (op, X.shape))
    return tuple(range(2, X.ndim))


@kernel("GlobalAveragePool")
def global_average_pool(ctx, X):
    axes = _spatial_axes("GlobalAveragePool", X)
    n, c = X.shape[0], X.shape[1]
    positions = int(np.prod(X.shape[2:]))
    if (X.dtype.kind == "f" and 0 < positions <= _PRODUCT_MAX_POSITIONS and X.size
            and not linalg.has_backend()):
        s = np.matmul(X.reshape(n * c, positions), np.ones(positions, dtype=X.dtype))
        s /= positions
        return (s.reshape((n, c) + (1,) * len(axes)),)
    return (np.asarray(np.mean(X, axis=axes, keepdims=True), dtype=X.dtype),)


@kernel("GlobalMaxPool")
def global_max_pool(ctx, X):
    axes = _spatial_axes("GlobalMaxPool", X)
    return (np.asarray(np.max(X, axis=axes, keepdims=True), dtype=X.dtype),)
