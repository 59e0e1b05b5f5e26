"""MaxPool (N-D; kernel_shape, strides, pads, auto_pad, dilations, ceil_mode) with the optional
Indices output computed as onnxruntime does: flat positions into the whole input tensor
(batch and channel included), first maximum in scan order on ties."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops import backend
from pytrain.ops.registry import kernel
from pytrain.ops.windows import Window, geometry, pad_spatial, tap_slices


def _lowest(dtype: np.dtype):
    if dtype.kind == "f":
        return -np.inf
    return np.iinfo(dtype).min


def _separable_max(xp: np.ndarray, win: Window) -> np.ndarray:
    """The window maxima of the padded input ``xp``, one spatial axis at a time: the maximum over a
    box is the maximum over its rows of the maxima along them, so a ``kh x kw`` window takes
    ``kh + kw`` passes (the first over whole contiguous rows, the next over an already reduced
    array) instead of ``kh * kw`` strided ones (CRNN's 2x2, 2x1 and 4x1 pools). A NaN in a window
    reaches its maximum either way (np.maximum propagates it)."""
    y = xp
    for ax in range(win.rank):
        k, s, d, o = win.kernel[ax], win.strides[ax], win.dilations[ax], win.out_shape[ax]
        if k == 1 and s == 1 and y.shape[2 + ax] == o:
            continue
        sl = [slice(None)] * y.ndim
        parts = []
        for t in range(k):
            sl[2 + ax] = slice(t * d, t * d + (o - 1) * s + 1, s)
            parts.append(y[tuple(sl)])
        acc = parts[0].copy() if len(parts) == 1 else np.maximum(parts[0], parts[1])
        for v in parts[2:]:
            np.maximum(acc, v, out=acc)
        y = acc
    return y if y is not xp else xp.copy()


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
    if not ctx.wants(1):
        return (_separable_max(xp, win), None)
    taps = list(win.taps())

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
