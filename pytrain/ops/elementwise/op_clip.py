"""Clip: min/max as optional inputs (opset >= 11); when min > max everything becomes max."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.registry import kernel


@kernel("Clip")
def clip(ctx, input, min=None, max=None):
    for name, v in (("min", min), ("max", max)):
        if v is not None and v.size != 1:
            raise InputError("Clip: input %s must be a scalar, got shape %s" % (name, v.shape))
    y = input
    if min is not None:
        y = np.maximum(y, min.reshape(()).astype(input.dtype))
    if max is not None:
        y = np.minimum(y, max.reshape(()).astype(input.dtype))
    return (np.asarray(y, dtype=input.dtype),)
