"""MaxPool (N-D; kernel_shape, strides, pads, auto_pad, dilations, ceil_mode) with the optional
Indices output computed as onnxruntime does: flat positions into the whole input tensor
(batch and channel included), first maximum in scan order on ties."""
from __future__ import annotations

import functools
import itertools

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
    y, win_tap = _scan_with_taps(xp, win)
    key = (tuple(X.shape), win.kernel, win.strides, win.dilations, win.pads_begin, win.out_shape, int(storage_order))
    # (kept per shape only while small: a large map's origins are an int64 array of the output's size)
    offsets, base = (_index_plan_kept if y.size <= _KEEP_INDEX_PLAN else _index_plan)(key)
    best = offsets[win_tap]  # (a fancy index: np.take is several times slower on small tables)
    best += base
    return (y, best)


def _tap_planes(xp: np.ndarray, win: Window) -> list:
    """What each tap (in ``win.taps()`` order) sees at every output position, ``(N, C, *out_shape)``:
    for windows that tile the input (kernel == strides, no dilation or padding: CRNN's pools) the
    taps de-interleaved by one copy into contiguous planes (the scan's passes then run over contiguous
    memory, not strided views), else strided views of ``xp``."""
    taps = list(win.taps())
    if (win.kernel != win.strides or any(d != 1 for d in win.dilations) or win.needs_padding
            or len(taps) == 1):
        return [xp[tap_slices(win, tap)] for tap in taps]
    n, c, rank = xp.shape[0], xp.shape[1], win.rank
    box = xp[(slice(None), slice(None)) + tuple(slice(0, o * k) for o, k in zip(win.out_shape, win.kernel))]
    split = box.reshape((n, c) + tuple(v for o, k in zip(win.out_shape, win.kernel) for v in (o, k)))
    order = tuple(3 + 2 * a for a in range(rank)) + (0, 1) + tuple(2 + 2 * a for a in range(rank))
    planes = np.ascontiguousarray(split.transpose(order)).reshape((len(taps), n, c) + tuple(win.out_shape))
    return list(planes)


def _scan_with_taps(xp: np.ndarray, win: Window) -> tuple:
    """The window maxima and the winning tap of each (its index in ``win.taps()``): strict '>' keeps
    the first maximum in scan order, like onnxruntime; once a window's running maximum is NaN no
    later tap wins. The winning tap only ever moves to a later one, so it is a running max of
    better * i: two cheap small-int passes instead of a masked copy (which mispredicts on random data)."""
    planes = _tap_planes(xp, win)
    tdt = np.uint8 if len(planes) < 256 else np.int32
    y = planes[0].copy()
    win_tap = np.zeros(y.shape, dtype=tdt)
    better = np.empty(y.shape, dtype=np.bool_)
    for i, v in enumerate(planes[1:], 1):
        np.greater(v, y, out=better)
        np.maximum(y, v, out=y)
        np.maximum(win_tap, better * tdt(i), out=win_tap)
    return y, win_tap


def _index_plan(key: tuple) -> tuple:
    """Each tap's flat offset in a spatial plane and, for every output position, its
    window origin's flat index into the whole input: Index = (n * C + c) * spatial size + origin +
    the winning tap's offset, with row-major spatial strides (column-major for storage_order 1).
    Resolved once per shape and window where kept (a model's pools see the same few; the arrays are
    read-only)."""
    x_shape, kernel, strides, dilations, pads_begin, out_shape, storage_order = key
    rank = len(kernel)
    taps = list(itertools.product(*[range(k) for k in kernel]))  # (C order, as Window.taps)
    order = list(range(rank))
    if storage_order == 1:
        order.reverse()
    sp_stride = [0] * rank
    size = 1
    for ax in reversed(order):
        sp_stride[ax] = size
        size *= x_shape[2 + ax]
    offsets = np.array([sum(t * d * st for t, d, st in zip(tap, dilations, sp_stride))
                        for tap in taps], dtype=np.int64)
    n, c = x_shape[0], x_shape[1]
    base = np.zeros((n, c) + tuple(out_shape), dtype=np.int64)
    base += (np.arange(n * c, dtype=np.int64) * size).reshape((n, c) + (1,) * rank)
    for ax in range(rank):
        shape = [1] * (2 + rank)
        shape[2 + ax] = out_shape[ax]
        origin = np.arange(out_shape[ax], dtype=np.int64) * strides[ax] - pads_begin[ax]
        base += (origin * sp_stride[ax]).reshape(shape)
    offsets.setflags(write=False)
    base.setflags(write=False)
    return offsets, base


#: outputs up to this many elements keep their window origins between calls (16 shapes: 32 MB at most)
_KEEP_INDEX_PLAN = 1 << 18
_index_plan_kept = functools.lru_cache(maxsize=16)(_index_plan)
