"""Sin and Cos."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


@kernel("Sin")
def sin(ctx, input):
    with np.errstate(invalid="ignore"):  # sin(inf) is NaN
        return (np.asarray(np.sin(input), dtype=input.dtype),)


@kernel("Cos")
def cos(ctx, input):
    with np.errstate(invalid="ignore"):
        return (np.asarray(np.cos(input), dtype=input.dtype),)
