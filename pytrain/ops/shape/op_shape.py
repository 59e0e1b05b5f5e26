"""Shape (with opset-15 start/end) and Size: int64 metadata of a tensor."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


@kernel("Shape")
def shape(ctx, data, *, start=0, end=None):
    r = data.ndim
    s = start + r if start < 0 else start
    e = r if end is None else (end + r if end < 0 else end)
    s = min(max(s, 0), r)
    e = min(max(e, 0), r)
    return (np.array(data.shape[s:e], dtype=np.int64),)


@kernel("Size")
def size(ctx, data):
    return (np.array(data.size, dtype=np.int64),)
