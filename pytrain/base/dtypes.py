"""ONNX tensor element types and their numpy dtypes."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError

# TensorProto.DataType values, from onnx.proto.
UNDEFINED = 0
FLOAT = 1
UINT8 = 2
INT8 = 3
UINT16 = 4
INT16 = 5
INT32 = 6
INT64 = 7
STRING = 8
BOOL = 9
FLOAT16 = 10
DOUBLE = 11
UINT32 = 12
UINT64 = 13
COMPLEX64 = 14
COMPLEX128 = 15
BFLOAT16 = 16
# Element types pytrain has no numpy dtype for (numpy has none; onnx uses ml_dtypes): named so an
# error can say which one a model uses.
FLOAT8E4M3FN = 17
FLOAT8E4M3FNUZ = 18
FLOAT8E5M2 = 19
FLOAT8E5M2FNUZ = 20
UINT4 = 21
INT4 = 22
FLOAT4E2M1 = 23
FLOAT8E8M0 = 24
UINT2 = 25
INT2 = 26
FLOAT6E2M3 = 27
FLOAT6E3M2 = 28

#: int4 / uint4 in memory: one value a byte (unpacked), as one-field structured dtypes. numpy has no 4-bit
#: type; a dtype of their own keeps the ONNX type through Reshape, Gather, Identity and the like (so an export
#: writes int4 back), and an op that computes on it fails (numpy has no loop for it) instead of computing in
#: int8's range. Files hold them packed two a byte, low nibble first (:func:`unpack_four_bit`).
INT4_NP = np.dtype([("int4", np.int8)])
UINT4_NP = np.dtype([("uint4", np.uint8)])
#: the numpy type holding a 4-bit type's values, and its range
_FOUR_BIT: Dict[np.dtype, Tuple[np.dtype, int, int]] = {
    INT4_NP: (np.dtype(np.int8), -8, 7), UINT4_NP: (np.dtype(np.uint8), 0, 15)}

_TO_NUMPY: Dict[int, np.dtype] = {
    FLOAT: np.dtype(np.float32),
    UINT8: np.dtype(np.uint8),
    INT8: np.dtype(np.int8),
    UINT16: np.dtype(np.uint16),
    INT16: np.dtype(np.int16),
    INT32: np.dtype(np.int32),
    INT64: np.dtype(np.int64),
    STRING: np.dtype(object),
    BOOL: np.dtype(np.bool_),
    FLOAT16: np.dtype(np.float16),
    DOUBLE: np.dtype(np.float64),
    UINT32: np.dtype(np.uint32),
    UINT64: np.dtype(np.uint64),
    INT4: INT4_NP,
    UINT4: UINT4_NP,
}
_FROM_NUMPY: Dict[np.dtype, int] = {v: k for k, v in _TO_NUMPY.items()}

NAMES: Dict[int, str] = {
    UNDEFINED: "undefined", FLOAT: "float32", UINT8: "uint8", INT8: "int8", UINT16: "uint16",
    INT16: "int16", INT32: "int32", INT64: "int64", STRING: "string", BOOL: "bool",
    FLOAT16: "float16", DOUBLE: "float64", UINT32: "uint32", UINT64: "uint64", BFLOAT16: "bfloat16",
    COMPLEX64: "complex64", COMPLEX128: "complex128", FLOAT8E4M3FN: "float8e4m3fn",
    FLOAT8E4M3FNUZ: "float8e4m3fnuz", FLOAT8E5M2: "float8e5m2", FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    UINT4: "uint4", INT4: "int4", FLOAT4E2M1: "float4e2m1", FLOAT8E8M0: "float8e8m0", UINT2: "uint2",
    INT2: "int2", FLOAT6E2M3: "float6e2m3", FLOAT6E3M2: "float6e3m2",
}


def to_numpy(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type (``TensorProto.FLOAT`` -> float32)."""
    try:
        return _TO_NUMPY[elem_type]
    except KeyError:
        raise GraphError("ONNX element type %s (%r) is not supported; supported: %s" % (
            NAMES.get(elem_type, "unknown"), elem_type,
            ", ".join(NAMES[k] for k in sorted(_TO_NUMPY)))) from None


def from_numpy(dtype: "np.dtype | type") -> int:
    """The ONNX element type of a numpy dtype."""
    dt = np.dtype(dtype)
    if dt.kind in "US":
        return STRING
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise GraphError("numpy dtype %s has no ONNX element type" % dt) from None


def is_float(elem_type: int) -> bool:
    """Whether gradients can flow through tensors of this element type."""
    return elem_type in (FLOAT, DOUBLE, FLOAT16, BFLOAT16)


def is_four_bit(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is pytrain's int4 or uint4 (:data:`INT4_NP`, :data:`UINT4_NP`)."""
    return dtype in _FOUR_BIT


def four_bit_range(dtype: np.dtype) -> Tuple[int, int]:
    """(lowest, highest) value of int4 (-8, 7) or uint4 (0, 15)."""
    return _FOUR_BIT[dtype][1:]


def four_bit_values(a: np.ndarray) -> np.ndarray:
    """An int4 / uint4 array's values as an int8 / uint8 view (other arrays as they are)."""
    return a.view(_FOUR_BIT[a.dtype][0]) if a.dtype in _FOUR_BIT else a


def as_four_bit(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integer ``values`` already in range as an int4 / uint4 (``dtype``) array."""
    return np.ascontiguousarray(values, dtype=_FOUR_BIT[dtype][0]).view(dtype)


def to_four_bit(a: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """A fed array (integers, or onnx's ml_dtypes int4 / uint4) as ``dtype``, its values checked against the
    4-bit range: numpy's own cast to the structured dtype would wrap them silently."""
    if a.dtype == dtype:
        return a
    v = np.asarray(a).astype(np.int64)
    lo, hi = four_bit_range(dtype)
    if v.size and (v.min() < lo or v.max() > hi or not np.array_equal(v, np.asarray(a).astype(np.float64))):
        raise InputError("%s is %s: its values must be integers in [%d, %d]" % (what, NAMES[_FROM_NUMPY[dtype]],
                                                                              lo, hi))
    return as_four_bit(v, dtype)


def unpack_four_bit(packed: np.ndarray, count: int, dtype: np.dtype) -> np.ndarray:
    """The ``count`` int4 / uint4 values of bytes holding two each, low nibble first (ONNX's layout)."""
    b = np.asarray(packed, dtype=np.uint8).reshape(-1)
    v = np.empty(2 * b.size, np.uint8)
    v[0::2] = b & np.uint8(15)
    v[1::2] = b >> np.uint8(4)
    v = v[:count]
    if dtype == INT4_NP:
        v = ((v ^ np.uint8(8)).astype(np.int8) - np.int8(8)).astype(np.int8)
    return as_four_bit(v, dtype)


def pack_four_bit(a: np.ndarray) -> bytes:
    """An int4 / uint4 array's values packed two a byte, low nibble first (zero high nibble when odd)."""
    v = four_bit_values(np.ascontiguousarray(a)).reshape(-1).astype(np.uint8) & np.uint8(15)
    if v.size % 2:
        v = np.concatenate([v, np.zeros(1, np.uint8)])
    return (v[0::2] | (v[1::2] << np.uint8(4))).astype(np.uint8).tobytes()


def storage_bytes(elem_type: int, count: int) -> int:
    """How many bytes ``count`` values of ``elem_type`` take in a file (4-bit types: two a byte)."""
    if elem_type in (INT4, UINT4):
        return (count + 1) // 2
    return count * to_numpy(elem_type).itemsize
