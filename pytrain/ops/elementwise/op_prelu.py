"""PRelu: x for x >= 0, slope * x for x < 0, with slope broadcast unidirectionally to X's shape
(so the output always has X's shape; torch exports nn.PReLU's weight as (C, 1, 1))."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.common import broadcasts_to
from pytrain.ops.registry import kernel


@kernel("PRelu")
def prelu(ctx, X, slope):
    if not broadcasts_to(slope.shape, X.shape):
        raise InputError("PRelu: slope of shape %s does not broadcast (unidirectionally) to X's shape %s"
                         % (tuple(slope.shape), tuple(X.shape)))
    if slope.dtype != X.dtype:
        raise InputError("PRelu: slope is %s but X is %s; they must have one type" % (slope.dtype, X.dtype))
    with np.errstate(invalid="ignore"):  # NaN < 0 (numpy 1.17 warns)
        return (np.asarray(np.where(X < 0, X * slope, X), dtype=X.dtype),)
