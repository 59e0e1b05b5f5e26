"""Gather: take entries along one axis; negative indices count from the end."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.common import norm_axis
from pytrain.ops.registry import kernel


@kernel("Gather")
def gather(ctx, data, indices, *, axis=0):
    a = norm_axis("Gather", axis, data.ndim)
    if indices.dtype.kind not in "iu":
        raise InputError("Gather: indices must be integers, got %s" % indices.dtype)
    dim = data.shape[a]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise InputError("Gather: indices must lie in [%d, %d) for axis %d of data shape %s, got %d..%d"
                         % (-dim, dim, a, data.shape, indices.min(), indices.max()))
    # np.take wants intp, which is int32 in the browser (wasm32): int64 indices would not cast
    return (np.asarray(np.take(data, indices.astype(np.intp, copy=False), axis=a)),)
