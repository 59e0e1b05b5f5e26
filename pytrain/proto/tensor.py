"""TensorProto <-> numpy."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.base import dtypes, limits
from pytrain.errors import ModelFormatError
from pytrain.proto.onnx_pb import TensorProto

EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
#: the fields a TensorProto may keep its values in (one at most)
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def to_array(t: TensorProto, where: str = "", view: bool = False) -> np.ndarray:
    """The tensor's values as a numpy array: a fresh, writable array, or with ``view`` (for a constant
    that is only read) a read-only view of the tensor's ``raw_data`` where it has one, so the values are
    held once, in the model's bytes."""
    label = "tensor %r%s" % (t.name, (" in " + where) if where else "")
    if t.data_location == EXTERNAL or t.external_data:
        raise ModelFormatError(
            "%s keeps its data in an external file (ONNX external data) that was not read in: load the "
            "model with pytrain.engine.validate.load_model(path) (reads the files next to it) or "
            "load_model(bytes, external_data={location: bytes})" % label)
    if t.segment is not None:
        raise ModelFormatError("%s is a segment of a larger tensor, which pytrain does not support" % label)
    dt = dtypes.to_numpy(t.data_type)
    shape = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in shape):
        raise ModelFormatError("%s has a negative dimension in its shape %s" % (label, list(shape)))
    count = limits.check_tensor(shape, dt.itemsize, label)
    stored = [f for f in _DATA_FIELDS if t.HasField(f)]
    if len(stored) > 1:
        raise ModelFormatError("%s holds its values in two fields (%s); a tensor has one"
                               % (label, " and ".join(stored)))
    if t.data_type == dtypes.STRING and stored and stored[0] != "string_data":
        raise ModelFormatError("%s is a STRING tensor but keeps its values in %s; strings live in string_data"
                               % (label, stored[0]))
    if dtypes.is_four_bit(dt):
        return _four_bit(t, label, count, shape, dt, stored)
    if t.HasField("raw_data") and t.data_type != dtypes.STRING:
        raw = t.raw_data
        if len(raw) != count * dt.itemsize:
            raise ModelFormatError("%s: raw_data has %d bytes, expected %d for shape %s of %s"
                                   % (label, len(raw), count * dt.itemsize, list(shape), dt))
        values = np.frombuffer(raw, dtype=dt.newbyteorder("<"))
        if view and values.flags.aligned:  # (a big-endian machine still gets a converted copy)
            return values.astype(dt, copy=False).reshape(shape)
        return values.astype(dt).reshape(shape)
    if t.data_type == dtypes.STRING:
        if len(t.string_data) != count:
            raise ModelFormatError("%s has %d strings, expected %d for shape %s"
                                   % (label, len(t.string_data), count, list(shape)))
        values = np.empty(count, dtype=object)
        values[:] = list(t.string_data)
    elif t.data_type == dtypes.DOUBLE:
        values = np.asarray(t.double_data, dtype=np.float64)
    elif t.data_type == dtypes.INT64:
        values = np.asarray(t.int64_data, dtype=np.int64)
    elif t.data_type in (dtypes.UINT32, dtypes.UINT64):
        values = np.asarray(t.uint64_data, dtype=dt)
    elif t.data_type == dtypes.FLOAT16:
        values = np.asarray(t.int32_data, dtype=np.uint16).view(np.float16)
    elif t.data_type == dtypes.FLOAT:
        values = np.asarray(t.float_data, dtype=np.float32)
    else:  # int32, int16, int8, uint16, uint8, bool live in int32_data
        values = np.asarray(t.int32_data, dtype=np.int64).astype(dt)
    if values.size != count:
        raise ModelFormatError("%s has %d values, expected %d for shape %s"
                               % (label, values.size, count, list(shape)))
    return values.reshape(shape)


def _four_bit(t: TensorProto, label: str, count: int, shape: tuple, dt: np.dtype, stored: list) -> np.ndarray:
    """An int4 / uint4 tensor, packed two a byte in raw_data or one byte an int32 in int32_data (ONNX's
    layout), unpacked: pytrain holds one value a byte (pytrain.base.dtypes.INT4_NP)."""
    want = (count + 1) // 2
    if stored and stored[0] not in ("raw_data", "int32_data"):
        raise ModelFormatError("%s is %s but keeps its values in %s; 4-bit values live in raw_data or int32_data"
                               % (label, dtypes.NAMES[t.data_type], stored[0]))
    packed = np.frombuffer(t.raw_data, np.uint8) if t.HasField("raw_data") else \
        np.asarray(t.int32_data, dtype=np.int64).astype(np.uint8)
    if packed.size != want:
        raise ModelFormatError("%s: %d bytes, expected %d for shape %s of %s (two values a byte)"
                               % (label, packed.size, want, list(shape), dtypes.NAMES[t.data_type]))
    return dtypes.unpack_four_bit(packed, count, dt).reshape(shape)


def from_array(array: np.ndarray, name: Optional[str] = None) -> TensorProto:
    """A TensorProto holding ``array`` (little-endian raw_data; strings in string_data)."""
    a = np.asarray(array)
    t = TensorProto()
    t.dims = [int(d) for d in a.shape]
    t.data_type = dtypes.from_numpy(a.dtype)
    if name is not None:
        t.name = name
    if t.data_type == dtypes.STRING:
        t.string_data = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in a.ravel()]
    elif dtypes.is_four_bit(a.dtype):
        t.raw_data = dtypes.pack_four_bit(a)
    else:
        t.raw_data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
    return t
