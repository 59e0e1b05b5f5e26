"""Variadic element-wise ops with broadcasting: Max, Min, Sum, Mean."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.registry import kernel


def _fold(op: str, ufunc, inputs) -> np.ndarray:
    if not inputs:
        raise InputError("%s: needs at least one input" % op)
    y = inputs[0]
    for x in inputs[1:]:
        y = ufunc(y, x)
    return np.asarray(y, dtype=inputs[0].dtype)


@kernel("Max")
def max_(ctx, *data_0):
    return (_fold("Max", np.maximum, data_0),)


@kernel("Min")
def min_(ctx, *data_0):
    return (_fold("Min", np.minimum, data_0),)


@kernel("Sum")
def sum_(ctx, *data_0):
    return (_fold("Sum", np.add, data_0),)


@kernel("Mean")
def mean(ctx, *data_0):
    s = _fold("Mean", np.add, data_0)
    if len(data_0) == 1:
        return (s,)
    return (np.asarray(s / s.dtype.type(len(data_0)), dtype=s.dtype),)
