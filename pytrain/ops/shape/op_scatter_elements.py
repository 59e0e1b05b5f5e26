"""ScatterElements: a copy of data with updates[i][j] written at data[indices[i][j]][j] (for axis 0;
likewise for the others), combined by ``reduction`` (none: opset 11, add/mul: 16, max/min: 18)."""
from __future__ import annotations

from pytrain.errors import InputError
from pytrain.ops.registry import kernel
from pytrain.ops.shape._indices import element_positions, reduction_of, scatter


@kernel("ScatterElements")
def scatter_elements(ctx, data, indices, updates, *, axis=0, reduction="none"):
    red = reduction_of("ScatterElements", reduction, ctx.opset)
    if updates.shape != indices.shape:
        raise InputError("ScatterElements: updates shape %s must equal indices shape %s"
                         % (updates.shape, indices.shape))
    if updates.dtype != data.dtype:
        raise InputError("ScatterElements: updates are %s, data is %s" % (updates.dtype, data.dtype))
    pos = element_positions("ScatterElements", data.shape, indices, axis)
    return (scatter(data, pos, updates, red),)
