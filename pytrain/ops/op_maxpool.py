"""MaxPool (N-D; kernel_shape, strides, pads, auto_pad, dilations, ceil_mode) with the optional
Indices output computed as onnxruntime does: flat positions into the whole input tensor
(batch and channel included), first maximum in scan order on ties."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.registry import kernel
from pytrain.ops.windows import geometry, pad_spatial, tap_slices


def _lowest(dtype: np.dtype):
    if dtype.kind == "f":
        return -np.inf
    return np.iinfo(dtype).min


@kernel("MaxPool")
def max_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None,
             pads=None, storage_order=0, strides=None):
    if not kernel_shape:
        raise GraphError("MaxPool: attribute kernel_shape is required")
    if X.ndim < 3:
        raise InputError("MaxPool: input must be (N, C, d1, ...), got shape %s" % (X.shape,))
    if storage_order not in (0, 1):
        raise GraphError("MaxPool: storage_order must be 0 or 1, got %r" % (storage_order,))
    win = geometry("MaxPool", X.shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    xp = pad_spatial(X, win, _lowest(X.dtype))
    taps = list(win.taps())
    if not ctx.wants(1):
        y = xp[tap_slices(win, taps[0])].copy()
        for tap in taps[1:]:
            np.maximum(y, xp[tap_slices(win, tap)], out=y)
        return (y, None)

    # Track the winning tap per output; strict '>' keeps the first maximum, like onnxruntime.
    y = xp[tap_slices(win, taps[0])].copy()
    best = np.zeros(y.shape, dtype=np.int64)
    for i, tap in enumerate(taps[1:], 1):
        v = xp[tap_slices(win, tap)]
        better = v > y
        np.copyto(y, v, where=better)
        best[better] = i
    tap_coords = np.array(taps, dtype=np.int64)  # (n_taps, rank)
    n, c = X.shape[0], X.shape[1]
    flat = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * win.rank)
    axes = list(range(win.rank))
    if storage_order == 1:
        axes.reverse()  # column-major: the first spatial axis varies fastest
    size = 1
    spatial = np.zeros(y.shape, dtype=np.int64)
    for ax in reversed(axes):
        o = win.out_shape[ax]
        shape = [1] * (2 + win.rank)
        shape[2 + ax] = o
        start = (np.arange(o, dtype=np.int64) * win.strides[ax] - win.pads_begin[ax]).reshape(shape)
        pos = start + tap_coords[:, ax][best] * win.dilations[ax]
        spatial += pos * size
        size *= win.in_shape[ax]
    indices = flat * size + spatial
    return (y, indices)
