"""A small declarative protobuf message: fields are declared once, decoding and encoding are generic.

Scalar fields read as their proto default when unset but remember whether they were set, because
ONNX relies on presence (an ``AttributeProto`` with ``i = 0`` must still carry its ``i`` field).
"""
from __future__ import annotations

import contextlib
import struct
from typing import Any, Callable, ClassVar, Dict, Iterable, Iterator, List, Optional, Tuple, Type, Union

from pytrain.errors import ModelFormatError
from pytrain.proto import wire

#: How deep messages may nest (a model's graphs inside attributes inside nodes...): far beyond any real
#: model, far below Python's recursion limit, so a hostile file is a ModelFormatError, not a RecursionError.
MAX_DEPTH = 64

# field kinds
INT64, INT32, UINT64, FLOAT, DOUBLE, STRING, BYTES, MESSAGE = (
    "int64", "int32", "uint64", "float", "double", "string", "bytes", "message")

_DEFAULTS = {INT64: 0, INT32: 0, UINT64: 0, FLOAT: 0.0, DOUBLE: 0.0, STRING: "", BYTES: b""}
_VARINT_KINDS = (INT64, INT32, UINT64)
#: bytes values a decode returns for an equal payload instead of a copy, by length (:func:`sharing`)
_shared: Dict[int, List[bytes]] = {}


@contextlib.contextmanager
def sharing(values: Iterable[bytes], min_size: int = 1024) -> Iterator[None]:
    """While active, a bytes field decoded equal to one of ``values`` (of ``min_size`` bytes or more) is that very
    object, not a copy: a model holding the weights another already holds (the eval model beside the training
    model) adds no memory, not even while it is read. (Not views of the buffer read: a payload's offset in the
    stream is unaligned, and numpy would copy an unaligned float array at every use.)"""
    global _shared
    before = _shared
    table: Dict[int, List[bytes]] = {}
    for v in values:
        if len(v) >= min_size:
            table.setdefault(len(v), []).append(v)
    _shared = table
    try:
        yield
    finally:
        _shared = before


class Field:
    """One declared field: number, name, kind, repeated/packed, and the message type for MESSAGE."""

    __slots__ = ("number", "name", "kind", "repeated", "packed", "_msg")

    def __init__(self, number: int, name: str, kind: str, repeated: bool = False,
                 packed: bool = False, msg: "Optional[Callable[[], Type[Message]]]" = None) -> None:
        self.number = number
        self.name = name
        self.kind = kind
        self.repeated = repeated
        self.packed = packed
        self._msg = msg

    @property
    def msg(self) -> "Type[Message]":
        assert self._msg is not None
        return self._msg()


class Message:
    """Base of the ONNX messages. Subclasses set FIELDS (a tuple of Field)."""

    FIELDS: ClassVar[Tuple[Field, ...]] = ()
    _BY_NUMBER: ClassVar[Dict[int, Field]] = {}
    _BY_NAME: ClassVar[Dict[str, Field]] = {}
    __slots__ = ("_has", "_unknown")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._BY_NUMBER = {f.number: f for f in cls.FIELDS}
        cls._BY_NAME = {f.name: f for f in cls.FIELDS}

    def __init__(self, **values: Any) -> None:
        object.__setattr__(self, "_has", set())
        object.__setattr__(self, "_unknown", [])
        for f in self.FIELDS:
            if f.repeated:
                object.__setattr__(self, f.name, [])
            elif f.kind == MESSAGE:
                object.__setattr__(self, f.name, None)
            else:
                object.__setattr__(self, f.name, _DEFAULTS[f.kind])
        for name, value in values.items():
            if name not in self._BY_NAME:
                raise TypeError("%s has no field %r" % (type(self).__name__, name))
            setattr(self, name, list(value) if self._BY_NAME[name].repeated else value)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        self._has.add(name)

    def HasField(self, name: str) -> bool:
        """protobuf-style presence: set scalars, non-None messages."""
        f = self._BY_NAME[name]
        if f.repeated:
            return bool(getattr(self, name))
        if f.kind == MESSAGE:
            return getattr(self, name) is not None
        return name in self._has

    def ClearField(self, name: str) -> None:
        f = self._BY_NAME[name]
        if f.repeated:
            object.__setattr__(self, name, [])
        elif f.kind == MESSAGE:
            object.__setattr__(self, name, None)
        else:
            object.__setattr__(self, name, _DEFAULTS[f.kind])
        self._has.discard(name)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.SerializeToString() == other.SerializeToString()

    def __repr__(self) -> str:
        parts = []
        for f in self.FIELDS:
            v = getattr(self, f.name)
            if self.HasField(f.name):
                if isinstance(v, (bytes, list)) and len(v) > 8:
                    v = "<%d %s>" % (len(v), "bytes" if isinstance(v, bytes) else "items")
                parts.append("%s=%r" % (f.name, v))
        return "%s(%s)" % (type(self).__name__, ", ".join(parts))

    # -- decoding -------------------------------------------------------------------------
    @classmethod
    def FromString(cls, data: Union[bytes, bytearray, memoryview]) -> "Message":
        """Decode a serialized message; raises ModelFormatError on malformed or truncated input."""
        buf = bytes(data)
        msg = cls()
        msg.merge_from(buf, 0, len(buf), 0)
        return msg

    def merge_from(self, buf: bytes, start: int, end: int, depth: int) -> None:
        """Read the fields of buf[start:end] (a message nested ``depth`` deep) into this message: the wire
        protocol every message speaks to the messages it holds."""
        cls = type(self)
        if depth > MAX_DEPTH:
            raise ModelFormatError("malformed protobuf: %s nested more than %d messages deep" % (cls.__name__, MAX_DEPTH))
        by_number = cls._BY_NUMBER
        for number, wt, value in wire.iter_fields(buf, start, end):
            f = by_number.get(number)
            if f is None:
                self._unknown.append((number, wt, value if not isinstance(value, tuple)
                                      else buf[value[0]:value[1]]))
                continue
            try:
                self._read_field(f, wt, value, buf, depth)
            except (UnicodeDecodeError, struct.error) as e:
                raise ModelFormatError("malformed protobuf: %s.%s: %s" % (cls.__name__, f.name, e)) from None

    def _read_field(self, f: Field, wt: int, value: Any, buf: bytes, depth: int) -> None:
        if f.kind == MESSAGE:
            if wt != wire.LEN:
                raise ModelFormatError("malformed protobuf: message field %s has wire type %d" % (f.name, wt))
            sub = f.msg()
            sub.merge_from(buf, value[0], value[1], depth + 1)
            if f.repeated:
                getattr(self, f.name).append(sub)
            else:
                object.__setattr__(self, f.name, sub)
            return
        if f.repeated:
            target = getattr(self, f.name)
            if wt == wire.LEN and f.kind not in (STRING, BYTES):
                target.extend(_unpack(f, buf, value[0], value[1]))
            else:
                target.append(_scalar_from_wire(f, wt, value, buf))
            return
        object.__setattr__(self, f.name, _scalar_from_wire(f, wt, value, buf))
        self._has.add(f.name)

    # -- encoding -------------------------------------------------------------------------
    def SerializeToString(self) -> bytes:
        out = Pieces()
        self.encode_into(out)
        return out.join()

    def encode_into(self, out: "Pieces") -> None:
        """Append this message's wire bytes to ``out`` (the protocol's other half: a message writes the
        messages it holds through it)."""
        for f in self.FIELDS:
            value = getattr(self, f.name)
            if f.repeated:
                if value:
                    _encode_repeated(out, f, value)
            elif f.kind == MESSAGE:
                if value is not None:
                    _encode_message(out, f.number, value)
            elif f.name in self._has:
                _encode_scalar(out, f, value)
        for number, wt, value in self._unknown:
            wire.write_tag(out, number, wt)
            if wt == wire.VARINT:
                wire.write_varint(out, value)
            elif wt == wire.LEN:
                wire.write_varint(out, len(value))
                out += value
            else:
                out += value


#: the wire type each scalar kind must arrive with (packed repeated fields come as LEN, handled apart)
_WIRE_OF_KIND = {INT64: wire.VARINT, INT32: wire.VARINT, UINT64: wire.VARINT, FLOAT: wire.I32,
                 DOUBLE: wire.I64, STRING: wire.LEN, BYTES: wire.LEN, MESSAGE: wire.LEN}


def _scalar_from_wire(f: Field, wt: int, value: Any, buf: bytes) -> Any:
    kind = f.kind
    if wt != _WIRE_OF_KIND[kind]:
        raise ModelFormatError("malformed protobuf: field %s (%s) has wire type %d, expected %d"
                               % (f.name, kind, wt, _WIRE_OF_KIND[kind]))
    if kind in _VARINT_KINDS:
        return value if kind == UINT64 else wire.signed64(value)
    if kind == FLOAT:
        return struct.unpack("<f", value)[0]
    if kind == DOUBLE:
        return struct.unpack("<d", value)[0]
    if kind == BYTES and _shared:
        for same in _shared.get(value[1] - value[0], ()):
            if buf.startswith(same, value[0]):  # compared in place: no copy of the payload is made
                return same
    raw = buf[value[0]:value[1]]
    return raw.decode("utf-8") if kind == STRING else raw


def _unpack(f: Field, buf: bytes, start: int, end: int) -> List[Any]:
    """A packed run of scalars (parsers must accept packed and unpacked forms alike)."""
    if f.kind == FLOAT:
        n, rem = divmod(end - start, 4)
        if rem:
            raise ModelFormatError("malformed protobuf: packed floats in %s not a multiple of 4" % f.name)
        return list(struct.unpack_from("<%df" % n, buf, start))
    if f.kind == DOUBLE:
        n, rem = divmod(end - start, 8)
        if rem:
            raise ModelFormatError("malformed protobuf: packed doubles in %s not a multiple of 8" % f.name)
        return list(struct.unpack_from("<%dd" % n, buf, start))
    values = []
    pos = start
    signed = f.kind != UINT64
    while pos < end:
        v, pos = wire.read_varint(buf, pos, end)
        values.append(wire.signed64(v) if signed else v)
    return values


class Pieces:
    """A message's encoding in pieces: small writes go into a bytearray, payloads of ``BIG`` bytes or more (weights)
    are kept as the very objects they are, and :meth:`join` makes the bytes once. Serializing a model so holds its
    weights once more (the result), not three times (each nesting level's copy and the final one)."""

    BIG = 1 << 16
    __slots__ = ("parts", "buf", "done")

    def __init__(self) -> None:
        self.parts: List[Any] = []
        self.buf = bytearray()
        self.done = 0   # bytes in ``parts``

    def append(self, byte: int) -> None:
        self.buf.append(byte)

    def __iadd__(self, data: Any) -> "Pieces":
        if len(data) >= self.BIG:
            self._flush()
            self.parts.append(data)
            self.done += len(data)
        else:
            self.buf += data
        return self

    def __len__(self) -> int:
        return self.done + len(self.buf)

    def _flush(self) -> None:
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.done += len(self.buf)
            self.buf = bytearray()

    def add(self, other: "Pieces") -> None:
        """Append ``other``'s encoding."""
        if other.parts:
            self._flush()
            self.parts.extend(other.parts)
            self.done += other.done
        self.buf += other.buf

    def join(self) -> bytes:
        if not self.parts:
            return bytes(self.buf)
        self._flush()
        return b"".join(self.parts)


def _encode_message(out: Pieces, number: int, msg: Message) -> None:
    sub = Pieces()
    msg.encode_into(sub)
    wire.write_tag(out, number, wire.LEN)
    wire.write_varint(out, len(sub))
    out.add(sub)


def _encode_scalar(out: Pieces, f: Field, value: Any) -> None:
    kind = f.kind
    if kind in _VARINT_KINDS:
        wire.write_tag(out, f.number, wire.VARINT)
        wire.write_varint(out, int(value))
    elif kind == FLOAT:
        wire.write_tag(out, f.number, wire.I32)
        out += struct.pack("<f", value)
    elif kind == DOUBLE:
        wire.write_tag(out, f.number, wire.I64)
        out += struct.pack("<d", value)
    elif kind == STRING:
        wire.write_len(out, f.number, value.encode("utf-8"))
    else:
        wire.write_len(out, f.number, bytes(value))


def _encode_repeated(out: Pieces, f: Field, values: List[Any]) -> None:
    if f.kind == MESSAGE:
        for v in values:
            _encode_message(out, f.number, v)
    elif f.packed:
        if f.kind == FLOAT:
            payload = wire.pack_f32(values)
        elif f.kind == DOUBLE:
            payload = wire.pack_f64(values)
        else:
            buf = bytearray()
            for v in values:
                wire.write_varint(buf, int(v))
            payload = bytes(buf)
        wire.write_len(out, f.number, payload)
    else:
        for v in values:
            _encode_scalar(out, f, v)
