"""GatherND: out[i] = data[indices[i]] where each indices[i] is a k-tuple indexing data's first k axes
(after ``batch_dims`` axes shared by data and indices), picking an element or a slice."""
from __future__ import annotations

from pytrain.ops.registry import kernel
from pytrain.ops.shape._indices import batched_nd_positions


@kernel("GatherND")
def gather_nd(ctx, data, indices, *, batch_dims=0):
    pos = batched_nd_positions("GatherND", data.shape, indices, batch_dims)
    return (data.reshape(-1).take(pos),)
