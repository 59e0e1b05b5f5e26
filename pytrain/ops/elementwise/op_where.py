"""Where: elements of X where condition holds, of Y elsewhere (broadcasting)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.registry import kernel


@kernel("Where")
def where(ctx, condition, X, Y):
    if condition.dtype != np.bool_:
        raise InputError("Where: condition must be bool, got %s" % condition.dtype)
    return (np.asarray(np.where(condition, X, Y), dtype=X.dtype),)
