"""Protocol-buffers wire format: varints and tagged fields. Just what ONNX's messages need."""
from __future__ import annotations

import struct
from typing import List, Tuple

from pytrain.errors import ModelFormatError

VARINT, I64, LEN, I32 = 0, 1, 2, 5

_U64 = 1 << 64
_I64_SIGN = 1 << 63


def read_varint(buf: bytes, pos: int, end: int) -> Tuple[int, int]:
    """Decode a base-128 varint at ``pos``; returns (value, new_pos)."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ModelFormatError("truncated protobuf: varint runs past the end at byte %d" % pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ModelFormatError("malformed protobuf: varint longer than 10 bytes at byte %d" % pos)


def signed64(value: int) -> int:
    """Two's complement reading of a decoded varint (int32/int64 fields may be negative)."""
    return value - _U64 if value >= _I64_SIGN else value


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a varint; negatives become their 10-byte two's complement, as protobuf does."""
    if value < 0:
        value += _U64
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_tag(out: bytearray, number: int, wire_type: int) -> None:
    write_varint(out, (number << 3) | wire_type)


def write_len(out: bytearray, number: int, payload: bytes) -> None:
    write_tag(out, number, LEN)
    write_varint(out, len(payload))
    out += payload


def iter_fields(buf: bytes, pos: int, end: int) -> "List[Tuple[int, int, object]]":
    """Split a message into (field_number, wire_type, value) triples.

    value is an int for VARINT, raw 8/4 bytes for I64/I32, and a (start, stop) span for LEN
    (so large payloads such as raw tensor data are sliced once, by the caller that wants them).
    """
    fields = []
    while pos < end:
        key, pos = read_varint(buf, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ModelFormatError("malformed protobuf: field number 0 at byte %d" % pos)
        if wire_type == VARINT:
            value, pos = read_varint(buf, pos, end)
        elif wire_type == LEN:
            size, pos = read_varint(buf, pos, end)
            if pos + size > end:
                raise ModelFormatError(
                    "truncated protobuf: field %d needs %d bytes at byte %d but only %d remain"
                    % (number, size, pos, end - pos))
            value = (pos, pos + size)
            pos += size
        elif wire_type == I64:
            if pos + 8 > end:
                raise ModelFormatError("truncated protobuf: 8-byte field %d at byte %d" % (number, pos))
            value = buf[pos:pos + 8]
            pos += 8
        elif wire_type == I32:
            if pos + 4 > end:
                raise ModelFormatError("truncated protobuf: 4-byte field %d at byte %d" % (number, pos))
            value = buf[pos:pos + 4]
            pos += 4
        else:
            raise ModelFormatError("malformed protobuf: wire type %d (field %d) at byte %d"
                                   % (wire_type, number, pos))
        fields.append((number, wire_type, value))
    return fields


def pack_f32(values: "List[float]") -> bytes:
    return struct.pack("<%df" % len(values), *values)


def pack_f64(values: "List[float]") -> bytes:
    return struct.pack("<%dd" % len(values), *values)
