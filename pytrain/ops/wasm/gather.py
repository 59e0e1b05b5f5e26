"""GatherGrad along axis 0, an embedding's backward, on the wasm kernel (gather_grad.c).
"""
from __future__ import annotations

import numpy as np

from pytrain.ops.wasm import plain, ptr, kernels


def gather_grad(ctx, dY: np.ndarray, indices: np.ndarray, X: np.ndarray, *, axis: int = 0):
    """GatherGrad along axis 0 (an embedding's backward) with int64 indices (gather_grad.c), for
    registry.accelerate; an index out of range hands the node to numpy, which reports it."""
    if axis not in (0, -X.ndim) or X.ndim == 0 or not plain(dY, min_size=1) or indices.dtype != np.int64 \
            or not indices.flags.c_contiguous:
        return None
    rows = X.shape[0]
    inner = int(np.prod(X.shape[1:]))
    if dY.size != indices.size * inner or rows == 0:
        return None
    dx = np.zeros(X.shape, dtype=np.float32)
    acc = np.empty(rows * inner, dtype=np.float64)
    seen = np.zeros(rows, dtype=np.int32)
    if kernels.gather_grad(ptr(dY), ptr(indices), indices.size, ptr(dx), ptr(acc), ptr(seen), rows, inner):
        return None
    return (dx,)
