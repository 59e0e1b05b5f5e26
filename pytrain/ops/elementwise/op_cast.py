"""Cast (``to`` an ONNX element type) and CastLike (to another tensor's type)."""
from __future__ import annotations

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.ops.registry import kernel


def cast_to(op: str, x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``x`` converted to numpy dtype ``dt`` with ONNX rules (floats truncate toward zero)."""
    if x.dtype == dt:
        return x
    if dtypes.is_four_bit(x.dtype):
        return cast_to(op, dtypes.four_bit_values(x), dt)
    if dtypes.is_four_bit(dt):  # integers in int64 (floats truncated toward zero), wrapped to 4 bits as onnx does
        lo, hi = dtypes.four_bit_range(dt)
        with np.errstate(invalid="ignore", over="ignore"):
            v = cast_to(op, x, np.dtype(np.int64))
        return dtypes.as_four_bit((v - lo) % (hi - lo + 1) + lo, dt)
    if dt == np.dtype(object):  # to STRING: decimal text of each value
        return np.array([str(v) for v in x.reshape(-1).tolist()], dtype=object).reshape(x.shape)
    if x.dtype == np.dtype(object):
        try:
            return np.array([float(v) for v in x.reshape(-1).tolist()]).astype(dt).reshape(x.shape)
        except ValueError as e:
            raise InputError("%s: cannot parse a string as a number: %s" % (op, e)) from None
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dt)


@kernel("Cast")
def cast(ctx, input, *, to=None, saturate=1):
    if to is None:
        raise InputError("Cast: attribute 'to' is required")
    return (cast_to("Cast", input, dtypes.to_numpy(int(to))),)


@kernel("CastLike")
def cast_like(ctx, input, target_type, *, saturate=1):
    return (cast_to("CastLike", input, target_type.dtype),)
