"""MaxPool (N-D; kernel_shape, strides, pads, auto_pad, dilations, ceil_mode) with the optional
Indices output computed as onnxruntime does: flat positions into the whole input tensor
(batch and channel included), first maximum in scan order on ties."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops import backend
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
    fast_pool = backend.get("max_pool")  # the browser's wasm kernel
    if fast_pool is not None:
        fast = fast_pool(xp, win, ctx.wants(1), storage_order)
        if fast is not None:
            return fast
    taps = list(win.taps())
    if not ctx.wants(1):
        y = xp[tap_slices(win, taps[0])].copy()
        for tap in taps[1:]:
            np.maximum(y, xp[tap_slices(win, tap)], out=y)
        return (y, None)

    # Index = (n * C + c) * spatial size + window origin + offset of the winning tap, with
    # row-major spatial strides (column-major for storage_order 1). Strict '>' keeps the first
    # maximum in scan order, like onnxruntime.
    order = list(range(win.rank))
    if storage_order == 1:
        order.reverse()
    sp_stride = [0] * win.rank
    size = 1
    for ax in reversed(order):
        sp_stride[ax] = size
        size *= win.in_shape[ax]

    # The winning tap index only ever grows during the scan (it changes only to a later tap), so
    # it is a running max of better * i: two cheap small-int passes instead of a masked copy.
    tdt = np.uint8 if len(taps) < 256 else np.int32
    y = xp[tap_slices(win, taps[0])].copy()
    win_tap = np.zeros(y.shape, dtype=tdt)
    better = np.empty(y.shape, dtype=np.bool_)
    for i, tap in enumerate(taps[1:], 1):
        v = xp[tap_slices(win, tap)]
        np.greater(v, y, out=better)
        np.maximum(y, v, out=y)
        np.maximum(win_tap, better * tdt(i), out=win_tap)
    offsets = np.array([sum(t * d * st for t, d, st in zip(tap, win.dilations, sp_stride))
                        for tap in taps], dtype=np.int64)
    best = np.take(offsets, win_tap)
    n, c = X.shape[0], X.shape[1]
    best += (np.arange(n * c, dtype=np.int64) * size).reshape((n, c) + (1,) * win.rank)
    for ax in range(win.rank):
        shape = [1] * (2 + win.rank)
        shape[2 + ax] = win.out_shape[ax]
        origin = np.arange(win.out_shape[ax], dtype=np.int64) * win.strides[ax] - win.pads_begin[ax]
        best += (origin * sp_stride[ax]).reshape(shape)
    return (y, best)
