"""Constant (one of its value* attributes) and ConstantOfShape."""
from __future__ import annotations

import numpy as np

from pytrain.base import limits
from pytrain.errors import GraphError, InputError
from pytrain.ops.common import int_list
from pytrain.ops.registry import kernel


@kernel("Constant")
def constant(ctx, *, value=None, value_float=None, value_floats=None, value_int=None,
             value_ints=None, value_string=None, value_strings=None, sparse_value=None):
    given = [(k, v) for k, v in (
        ("value", value), ("value_float", value_float), ("value_floats", value_floats),
        ("value_int", value_int), ("value_ints", value_ints), ("value_string", value_string),
        ("value_strings", value_strings), ("sparse_value", sparse_value)) if v is not None]
    if len(given) != 1:
        raise GraphError("Constant: exactly one value* attribute must be set, got %s"
                         % ([k for k, _ in given] or "none"))
    name, v = given[0]
    if name == "value":
        return (np.asarray(v),)
    if name == "value_float":
        return (np.array(v, dtype=np.float32),)
    if name == "value_floats":
        return (np.array(list(v), dtype=np.float32).reshape(len(v)),)
    if name == "value_int":
        return (np.array(v, dtype=np.int64),)
    if name == "value_ints":
        return (np.array(list(v), dtype=np.int64).reshape(len(v)),)
    if name == "value_string":
        return (np.array(v.decode() if isinstance(v, bytes) else v, dtype=object),)
    if name == "value_strings":
        return (np.array([s.decode() if isinstance(s, bytes) else s for s in v], dtype=object).reshape(len(v)),)
    raise GraphError("Constant: sparse_value is not supported; store the tensor densely in 'value'")


@kernel("ConstantOfShape")
def constant_of_shape(ctx, input, *, value=None):
    shape = int_list("ConstantOfShape", "input", input)
    if any(d < 0 for d in shape):
        raise InputError("ConstantOfShape: shape %s has a negative dimension" % (shape,))
    v = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value)
    if v.size != 1:
        raise GraphError("ConstantOfShape: attribute value must hold one element, got shape %s" % (v.shape,))
    limits.check_tensor(shape, v.dtype.itemsize, "ConstantOfShape")
    return (np.full(shape, v.reshape(-1)[0], dtype=v.dtype),)
