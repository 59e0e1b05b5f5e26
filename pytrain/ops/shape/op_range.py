"""Range: start, start + delta, ... up to (excluding) limit, in start's dtype."""
from __future__ import annotations

import math

import numpy as np

from pytrain.base import limits
from pytrain.errors import InputError
from pytrain.ops.common import scalar_of
from pytrain.ops.registry import kernel


@kernel("Range")
def range_(ctx, start, limit, delta):
    s = scalar_of("Range", "start", start, None)
    lim = scalar_of("Range", "limit", limit, None)
    d = scalar_of("Range", "delta", delta, None)
    if d == 0:
        raise InputError("Range: delta is 0")
    span = (lim - s) / d
    if not math.isfinite(span):
        raise InputError("Range: start %r, limit %r, delta %r give no finite length" % (s, lim, d))
    n = max(int(math.ceil(span)), 0)
    dt = np.asarray(start).dtype
    limits.check_tensor([n], dt.itemsize, "Range")
    if dt.kind in "iu":
        return (np.asarray(s + np.arange(n, dtype=np.int64) * d, dtype=dt),)
    return (np.asarray(s + np.arange(n, dtype=np.float64) * d, dtype=dt),)
