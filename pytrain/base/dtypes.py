"""ONNX tensor element types and their numpy dtypes."""
from __future__ import annotations

from typing import Dict

import numpy as np

from pytrain.errors import GraphError

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
