"""ScatterND: a copy of data with each updates[idx] (an element or a slice) written at
data[indices[idx]], where indices[idx] is a k-tuple indexing data's first k axes (k = indices.shape[-1]);
combined by ``reduction`` (none: opset 11, add/mul: 16, max/min: 18)."""
from __future__ import annotations

from pytrain.errors import InputError
from pytrain.ops.registry import kernel
from pytrain.ops.shape._indices import nd_positions, reduction_of, scatter


@kernel("ScatterND")
def scatter_nd(ctx, data, indices, updates, *, reduction="none"):
    red = reduction_of("ScatterND", reduction, ctx.opset)
    pos = nd_positions("ScatterND", data.shape, indices)
    if updates.shape != pos.shape:
        raise InputError("ScatterND: updates shape %s must be indices.shape[:-1] + data.shape[%d:] = %s"
                         % (updates.shape, indices.shape[-1], pos.shape))
    if updates.dtype != data.dtype:
        raise InputError("ScatterND: updates are %s, data is %s" % (updates.dtype, data.dtype))
    return (scatter(data, pos, updates, red),)
