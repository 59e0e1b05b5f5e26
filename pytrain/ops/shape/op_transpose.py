"""Transpose: permute axes (default: reverse them). Returns a view."""
from __future__ import annotations

from pytrain.errors import GraphError
from pytrain.ops.registry import kernel


@kernel("Transpose")
def transpose(ctx, data, *, perm=None):
    if perm is None or len(perm) == 0:
        return (data.transpose(),)
    p = [int(i) for i in perm]
    if sorted(p) != list(range(data.ndim)):
        raise GraphError("Transpose: perm %s is not a permutation of the %d axes of an input of shape %s"
                         % (p, data.ndim, data.shape))
    return (data.transpose(p),)
