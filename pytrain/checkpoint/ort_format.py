"""Checkpoints ONNX Runtime 1.19 writes (``CheckpointState.save_checkpoint`` of onnxruntime-training),
read in pure Python: parameters (trainable and frozen), optimizer state and properties.

ORT's checkpoint is a FlatBuffer with file identifier ``ODTC`` (schema: ORT's
``ort_training_checkpoint.fbs`` and, for tensors, ``ort.fbs``). A FlatBuffer is read in place:

- the first 4 bytes hold the offset of the root table;
- a table starts with a signed 32-bit offset back to its vtable; the vtable holds its own size,
  the table's size, then one 16-bit offset per field (0: the field is absent, its default holds);
- a string, a vector or a sub-table field holds an unsigned 32-bit offset from where it is stored;
- a vector is a 32-bit length followed by its elements (tables as offsets, scalars inline).

Every offset and length is checked against the buffer, so a damaged file is a CheckpointError.
"""
from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain.base import dtypes, limits
from pytrain.checkpoint.values import OptimizerState, Parameter, Properties
from pytrain.errors import CheckpointError

#: ORT's checkpoint flatbuffers carry this file identifier at bytes 4..8
FILE_IDENTIFIER = b"ODTC"

# field indexes in the schema's declaration order
_CHECKPOINT = {"version": 0, "module_state": 1, "optimizer_groups": 2, "property_bag": 3}
_MODULE_STATE = {"requires_grad_params": 0, "frozen_params": 1, "is_nominal_state": 2, "has_external_data": 3}
_OPTIMIZER_GROUP = {"group_name": 0, "step": 1, "initial_learning_rate": 2, "optimizer_states": 3}
_PARAM_OPT_STATE = {"param_name": 0, "momentums": 1}
_PROPERTY_BAG = {"ints": 0, "floats": 1, "strings": 2}
_PROPERTY = {"name": 0, "value": 1}
_TENSOR = {"name": 0, "doc_string": 1, "dims": 2, "data_type": 3, "raw_data": 4, "string_data": 5,
           "external_data_offset": 6}
#: ORT's momentum order for AdamW -> pytrain's optimizer state slots
_ADAMW_SLOTS = ("exp_avg", "exp_avg_sq")


def is_ort_checkpoint(data: bytes) -> bool:
    """True when ``data`` starts like an ORT training checkpoint."""
    return len(data) >= 8 and bytes(data[4:8]) == FILE_IDENTIFIER


class _Reader:
    """Bounds-checked access to one FlatBuffer."""

    def __init__(self, buf: bytes, label: str) -> None:
        self.buf = buf
        self.label = label

    def bad(self, why: str) -> CheckpointError:
        return CheckpointError("ONNX Runtime checkpoint %s is corrupted: %s" % (self.label, why))

    def _unpack(self, fmt: str, pos: int) -> Any:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise self.bad("an offset (%d) points outside the %d-byte file" % (pos, len(self.buf)))
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def root(self) -> int:
        return self._unpack("<I", 0)

    def field(self, table: int, index: int) -> int:
        """Position of field ``index`` of the table at ``table``, or 0 when absent."""
        vtable = table - self._unpack("<i", table)
        vsize = self._unpack("<H", vtable)
        if vsize < 4 or vsize % 2:
            raise self.bad("a table's vtable declares %d bytes" % vsize)
        slot = 4 + 2 * index
        if slot + 2 > vsize:
            return 0
        off = self._unpack("<H", vtable + slot)
        return table + off if off else 0

    def scalar(self, table: int, index: int, fmt: str, default: Any) -> Any:
        pos = self.field(table, index)
        return self._unpack(fmt, pos) if pos else default

    def indirect(self, pos: int) -> int:
        return pos + self._unpack("<I", pos)

    def table(self, table: int, index: int) -> Optional[int]:
        pos = self.field(table, index)
        return self.indirect(pos) if pos else None

    def vector(self, table: int, index: int) -> Tuple[int, int]:
        """(start of the elements, length) of a vector field; (0, 0) when absent."""
        pos = self.field(table, index)
        if not pos:
            return 0, 0
        start = self.indirect(pos)
        n = self._unpack("<I", start)
        return start + 4, n

    def tables(self, table: int, index: int) -> List[int]:
        start, n = self.vector(table, index)
        if n * 4 > len(self.buf):
            raise self.bad("a vector declares %d tables" % n)
        return [self.indirect(start + 4 * i) for i in range(n)]

    def bytes_(self, table: int, index: int) -> bytes:
        start, n = self.vector(table, index)
        if start + n > len(self.buf):
            raise self.bad("a byte vector of %d bytes runs past the end of the file" % n)
        return self.buf[start:start + n]

    def string(self, table: int, index: int) -> str:
        try:
            return self.bytes_(table, index).decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad("a name is not UTF-8") from None

    def int64s(self, table: int, index: int) -> List[int]:
        start, n = self.vector(table, index)
        if start + 8 * n > len(self.buf):
            raise self.bad("a vector of %d integers runs past the end of the file" % n)
        return list(struct.unpack_from("<%dq" % n, self.buf, start)) if n else []


def _tensor(r: _Reader, t: int, nominal: bool) -> Tuple[str, Optional[np.ndarray], tuple, np.dtype]:
    name = r.string(t, _TENSOR["name"])
    dims = tuple(r.int64s(t, _TENSOR["dims"]))
    if any(d < 0 for d in dims):
        raise r.bad("tensor %r has a negative dimension %s" % (name, list(dims)))
    elem = r.scalar(t, _TENSOR["data_type"], "<i", 0)
    try:
        dtype = np.dtype(dtypes.to_numpy(elem))
    except Exception:
        raise r.bad("tensor %r has data type %d, which pytrain does not hold in a checkpoint" % (name, elem)) from None
    if dtype.kind not in "biuf":
        raise r.bad("tensor %r has data type %s; a checkpoint holds numbers" % (name, dtype))
    if r.scalar(t, _TENSOR["external_data_offset"], "<q", -1) >= 0:
        raise CheckpointError("ONNX Runtime checkpoint %s keeps tensor %r in an external data file; pytrain reads "
                              "checkpoints whose data is inline (save smaller models, or re-save)" % (r.label, name))
    count = limits.check_tensor(dims, dtype.itemsize, "tensor %r of ORT checkpoint %s" % (name, r.label))
    if nominal:
        return name, None, dims, dtype
    raw = r.bytes_(t, _TENSOR["raw_data"])
    if len(raw) != count * dtype.itemsize:
        raise r.bad("tensor %r: shape %s of %s needs %d bytes, the file holds %d"
                    % (name, list(dims), dtype, count * dtype.itemsize, len(raw)))
    arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(dims)
    return name, arr, dims, dtype


def decode(data: bytes, label: str = "(bytes)") -> Tuple[Any, Any, Any]:
    """(parameters, properties, optimizer state) as :func:`pytrain.checkpoint.zip_format.decode` returns them."""
    limits.check_file(len(data), "checkpoint %s" % label)
    r = _Reader(bytes(data), label)
    if not is_ort_checkpoint(r.buf):
        raise r.bad("no ODTC file identifier")
    root = r.indirect(0)
    params: "OrderedDict[str, Parameter]" = OrderedDict()
    module = r.table(root, _CHECKPOINT["module_state"])
    if module is not None:
        nominal = bool(r.scalar(module, _MODULE_STATE["is_nominal_state"], "<B", 0))
        if r.scalar(module, _MODULE_STATE["has_external_data"], "<B", 0):
            raise CheckpointError("ONNX Runtime checkpoint %s keeps its parameters in an external data file "
                                  "(%s.data); pytrain reads checkpoints whose data is inline" % (label, label))
        for key, trains in (("requires_grad_params", True), ("frozen_params", False)):
            for t in r.tables(module, _MODULE_STATE[key]):
                name, arr, dims, dtype = _tensor(r, t, nominal)
                if name in params:
                    raise r.bad("parameter %r is stored twice" % name)
                params[name] = Parameter(name, arr, trains, dims, dtype)
    optimizer: Optional[OptimizerState] = None
    groups = r.tables(root, _CHECKPOINT["optimizer_groups"])
    if len(groups) > 1:
        raise CheckpointError("ONNX Runtime checkpoint %s holds %d optimizer groups; pytrain has one"
                              % (label, len(groups)))
    for grp in groups:
        step = r.scalar(grp, _OPTIMIZER_GROUP["step"], "<q", 0)
        lr = r.scalar(grp, _OPTIMIZER_GROUP["initial_learning_rate"], "<f", 0.0)
        if step < 0 or not np.isfinite(lr) or lr < 0:
            raise r.bad("the optimizer group holds step %d and learning rate %r" % (step, lr))
        slots: Dict[str, Dict[str, np.ndarray]] = {}
        for st in r.tables(grp, _OPTIMIZER_GROUP["optimizer_states"]):
            pname = r.string(st, _PARAM_OPT_STATE["param_name"])
            p = params.get(pname)
            if p is None:
                raise r.bad("optimizer state of %r belongs to no parameter of the checkpoint" % pname)
            moments = r.tables(st, _PARAM_OPT_STATE["momentums"])
            if len(moments) > len(_ADAMW_SLOTS):
                raise CheckpointError("ONNX Runtime checkpoint %s: parameter %r has %d optimizer states; pytrain "
                                      "reads AdamW's two moments (or none, SGD)" % (label, pname, len(moments)))
            for slot, t in zip(_ADAMW_SLOTS, moments):
                _, arr, dims, dtype = _tensor(r, t, False)
                if dims != tuple(p.shape):
                    raise r.bad("optimizer state of %r has shape %s, the parameter %s"
                                % (pname, list(dims), list(p.shape)))
                slots.setdefault(pname, {})[slot] = arr
        optimizer = OptimizerState(int(step), float(np.float32(lr)), slots)
    properties = Properties()
    bag = r.table(root, _CHECKPOINT["property_bag"])
    if bag is not None:
        for key, fmt in (("ints", "<q"), ("floats", "<f"), ("strings", None)):
            for t in r.tables(bag, _PROPERTY_BAG[key]):
                name = r.string(t, _PROPERTY["name"])
                if fmt is None:
                    properties[name] = r.string(t, _PROPERTY["value"])
                else:
                    value = r.scalar(t, _PROPERTY["value"], fmt, 0)
                    properties[name] = float(value) if key == "floats" else int(value)
    return params, properties, optimizer
