"""CumSum: running sums along one axis (opset 11/14); ``exclusive`` leaves each element out of its
own sum, ``reverse`` sums from the end of the axis."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.common import norm_axis
from pytrain.ops.registry import kernel


def cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """The running sum of ``x`` along ``axis`` (non-negative), in ``x``'s dtype."""
    src = np.flip(x, axis) if reverse else x
    # dtype: numpy would widen int32 (and float16 stays, but say it for all types alike)
    out = np.cumsum(src, axis=axis, dtype=x.dtype)
    if exclusive:
        # y[i] = sum of x[:i]: the inclusive sums shifted by one, starting at 0
        shifted = np.zeros_like(out)
        lead = [slice(None)] * x.ndim
        tail = [slice(None)] * x.ndim
        lead[axis] = slice(1, None)
        tail[axis] = slice(None, -1)
        shifted[tuple(lead)] = out[tuple(tail)]
        out = shifted
    return np.flip(out, axis) if reverse else out


@kernel("CumSum")
def cum_sum(ctx, x, axis, *, exclusive=0, reverse=0):
    a = np.asarray(axis)
    if a.dtype.kind not in "iu" or a.size != 1 or a.ndim > 1:
        raise InputError("CumSum: input axis must be a 0-D (or one-element 1-D) int32/int64 tensor, got %s of shape %s"
                         % (a.dtype, a.shape))
    if x.ndim == 0:
        raise InputError("CumSum: input x must have rank >= 1, got a scalar")
    ax = norm_axis("CumSum", int(a.reshape(-1)[0]), x.ndim, err=InputError)
    out = cumsum(x, ax, bool(exclusive), bool(reverse))
    return (np.ascontiguousarray(out),)
