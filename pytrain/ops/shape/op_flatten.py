"""Flatten: reshape to 2-D (prod(shape[:axis]), prod(shape[axis:]))."""
from __future__ import annotations

from pytrain.errors import GraphError
from pytrain.ops.registry import kernel


@kernel("Flatten")
def flatten(ctx, input, *, axis=1):
    r = input.ndim
    if not -r <= axis <= r:
        raise GraphError("Flatten: axis %d is out of range for rank %d (expected %d..%d)" % (axis, r, -r, r))
    a = axis + r if axis < 0 else axis
    outer = 1
    for d in input.shape[:a]:
        outer *= d
    inner = 1
    for d in input.shape[a:]:
        inner *= d
    return (input.reshape(outer, inner),)
