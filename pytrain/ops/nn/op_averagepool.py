"""AveragePool (N-D; kernel_shape, strides, pads, auto_pad, dilations, ceil_mode, count_include_pad)."""
from __future__ import annotations

from pytrain.errors import GraphError, InputError
from pytrain.ops.registry import kernel
from pytrain.ops.windows import avg_divisor, geometry, pad_spatial, tap_slices


@kernel("AveragePool")
def average_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None):
    if not kernel_shape:
        raise GraphError("AveragePool: attribute kernel_shape is required")
    if X.ndim < 3:
        raise InputError("AveragePool: input must be (N, C, d1, ...), got shape %s" % (X.shape,))
    win = geometry("AveragePool", X.shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    xp = pad_spatial(X, win, 0)
    taps = list(win.taps())
    y = xp[tap_slices(win, taps[0])].copy()
    for tap in taps[1:]:
        y += xp[tap_slices(win, tap)]
    y /= avg_divisor(win, count_include_pad).astype(X.dtype)
    return (y,)
