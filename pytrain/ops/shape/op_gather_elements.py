"""GatherElements: out[i][j][k] = data[index[i][j][k]][j][k] (for axis 0; likewise for the others),
torch.gather's semantics; negative indices count from the end of the axis."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel
from pytrain.ops.shape._indices import element_positions


@kernel("GatherElements")
def gather_elements(ctx, data, indices, *, axis=0):
    pos = element_positions("GatherElements", data.shape, indices, axis)
    # positions are checked in range, so the flat take cannot fail; the output has indices' shape
    return (np.asarray(np.take(data.reshape(-1), pos)),)
