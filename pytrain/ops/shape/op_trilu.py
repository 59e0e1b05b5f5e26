"""Trilu: keep the upper (upper=1: on and above diagonal k) or lower (upper=0: on and below
diagonal k) triangle of the last two axes, zeros elsewhere."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.registry import kernel


def triangle_mask(rows: int, cols: int, k: int, upper: bool) -> np.ndarray:
    """(rows, cols) bool mask of what Trilu keeps: j - i >= k (upper) or j - i <= k (lower)."""
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    return offset >= k if upper else offset <= k


@kernel("Trilu")
def trilu(ctx, input, k=None, *, upper=1):
    if input.ndim < 2:
        raise InputError("Trilu: input must have rank >= 2 (a matrix or a batch of them), got shape %s"
                         % (input.shape,))
    diag = 0
    if k is not None:
        kv = np.asarray(k)
        if kv.dtype.kind not in "iu" or kv.size != 1:
            raise InputError("Trilu: k must be one integer, got %s of shape %s" % (kv.dtype, kv.shape))
        diag = int(kv.reshape(-1)[0])
    keep = triangle_mask(input.shape[-2], input.shape[-1], diag, bool(upper))
    # np.where with a zero of input's own dtype: keeps the dtype, and masked infs/NaNs become 0
    return (np.where(keep, input, np.zeros((), dtype=input.dtype)),)
