"""Expand: broadcast to shape (bidirectional, so the result may be larger than ``shape``)."""
from __future__ import annotations

import numpy as np

from pytrain.base import limits
from pytrain.ops.common import broadcast_shape, int_list
from pytrain.ops.registry import kernel


@kernel("Expand")
def expand(ctx, input, shape):
    target = broadcast_shape("Expand", input.shape, int_list("Expand", "shape", shape))
    if target == input.shape:
        return (input,)
    limits.check_tensor(target, input.dtype.itemsize, "Expand")
    # a real array, not a read-only broadcast view: consumers may assume writable memory
    return (np.array(np.broadcast_to(input, target)),)
