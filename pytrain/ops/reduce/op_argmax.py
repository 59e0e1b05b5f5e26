"""ArgMax and ArgMin (axis, keepdims, select_last_index); int64 output."""
from __future__ import annotations

import numpy as np

from pytrain.ops.common import norm_axis
from pytrain.ops.registry import kernel


def _arg(op: str, fn, data: np.ndarray, axis: int, keepdims: int, select_last_index: int):
    a = norm_axis(op, axis, data.ndim)
    if select_last_index:
        # the last extreme is the first one in the reversed axis
        flipped = np.flip(data, axis=a)
        idx = data.shape[a] - 1 - fn(flipped, axis=a)
    else:
        idx = fn(data, axis=a)
    idx = np.asarray(idx, dtype=np.int64)
    return (np.expand_dims(idx, a) if keepdims else idx,)


@kernel("ArgMax")
def arg_max(ctx, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg("ArgMax", np.argmax, data, axis, keepdims, select_last_index)


@kernel("ArgMin")
def arg_min(ctx, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg("ArgMin", np.argmin, data, axis, keepdims, select_last_index)
