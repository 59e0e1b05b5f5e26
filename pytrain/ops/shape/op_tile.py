"""Tile: repeat the input repeats[i] times along axis i."""
from __future__ import annotations

import numpy as np

from pytrain.base import limits
from pytrain.errors import InputError
from pytrain.ops.common import int_list
from pytrain.ops.registry import kernel


@kernel("Tile")
def tile(ctx, input, repeats):
    reps = int_list("Tile", "repeats", repeats)
    if len(reps) != input.ndim or any(r < 0 for r in reps):
        raise InputError("Tile: repeats %s must hold %d non-negative values (rank of input %s)"
                         % (reps, input.ndim, input.shape))
    limits.check_tensor([d * r for d, r in zip(input.shape, reps)], input.dtype.itemsize, "Tile")
    return (np.tile(input, reps),)
