"""Concat: join tensors along one axis."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import norm_axis
from pytrain.ops.registry import kernel


@kernel("Concat")
def concat(ctx, *inputs, axis=None):
    if axis is None:
        raise GraphError("Concat: attribute axis is required")
    if not inputs:
        raise InputError("Concat: needs at least one input")
    a = norm_axis("Concat", axis, inputs[0].ndim)
    first = inputs[0].shape
    for i, x in enumerate(inputs[1:], 1):
        if x.ndim != len(first) or any(d != e for j, (d, e) in enumerate(zip(x.shape, first)) if j != a):
            raise InputError("Concat: input %d has shape %s, incompatible with input 0's %s along axis %d"
                             % (i, x.shape, first, a))
    if len(inputs) == 1:
        return (inputs[0],)
    return (np.concatenate(inputs, axis=a),)
