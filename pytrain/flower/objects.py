"""Flower's content-addressed objects: how a message's content travels through the Fleet API.

An object is ``"<Type> <child ids, comma-separated> <body length>" + NUL + body`` and its id is the
SHA-256 (hex) of those bytes. A Message's content is a tree of them:

    Message -> RecordDict -> ArrayRecord -> Array -> ArrayChunk
                          -> ConfigRecord
                          -> MetricRecord

RecordDict, ArrayRecord and Array bodies are JSON; an ArrayChunk body is a slice (at most 5 MiB)
of the array's ``.npy`` v1.0 bytes; Config and Metric records and the Message are protobuf.

Everything that arrives is checked before it is used: the id against the bytes, the head against
the body, the type against the place in the tree, the ``.npy`` header against the Array's dtype
and shape. A failed check raises :class:`ObjectError` naming the object and what was wrong.
"""
from __future__ import annotations

import hashlib
import io
import json
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from pytrain.base import limits
from pytrain.checkpoint.zip_format import read_npy_header
from pytrain.errors import ModelFormatError, PytrainError
from pytrain.flower import messages as pb

#: flwr's FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE default
MAX_CHUNK = 5 * 1024 * 1024
#: bytes a ``.npy`` header may take besides the data (flwr's are 128; numpy's own limit is 10,000)
MAX_NPY_HEADER = 10240
#: dimensions an Array may declare (numpy's own limit)
MAX_DIMS = 64
NUMPY_STYPE = "numpy.ndarray"
#: dtypes an Array may carry (no object or structured arrays: np.load must never unpickle)
_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
           "uint32", "uint64", "bool")


class ObjectError(PytrainError, ValueError):
    """An object from the server is malformed, has the wrong id, or does not fit where it is."""


class ArrayRecord(OrderedDict):
    """name -> numpy array (flwr's ArrayRecord)."""


class MetricRecord(OrderedDict):
    """name -> int, float or a list of them (flwr's MetricRecord)."""


class ConfigRecord(OrderedDict):
    """name -> bool, int, float, str, bytes or a list of one of them (flwr's ConfigRecord)."""


Record = Any  # ArrayRecord | MetricRecord | ConfigRecord


def object_id(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def make_object(kind: str, children: List[str], body: bytes) -> bytes:
    head = "%s %s %d" % (kind, ",".join(children), len(body))
    return head.encode("utf-8") + b"\x00" + bytes(body)


def parse_object(oid: str, content: bytes) -> Tuple[str, List[str], bytes]:
    """(type, child ids, body) of an object whose bytes must hash to ``oid``."""
    got = object_id(content)
    if got != oid:
        raise ObjectError("object %s: its content hashes to %s (sha256 mismatch): refused" % (oid, got))
    cut = content.find(b"\x00")
    if cut < 0:
        raise ObjectError("object %s: no NUL between head and body" % oid)
    try:
        kind, kids, length = content[:cut].decode("utf-8").split(" ")
        n = int(length)
    except ValueError:
        raise ObjectError("object %s: malformed head %r (expected '<type> <children> <length>')"
                          % (oid, content[:min(cut, 80)])) from None
    body = content[cut + 1:]
    if n != len(body):
        raise ObjectError("object %s: head says %d body bytes, got %d" % (oid, n, len(body)))
    return kind, kids.split(",") if kids else [], body


# -- encoding (deflate) ------------------------------------------------------------------------------
class Deflated:
    """An object's bytes plus the tree below it (what push-messages announces)."""

    __slots__ = ("id", "content", "children")

    def __init__(self, kind: str, children: "List[Deflated]", body: bytes) -> None:
        unique: "OrderedDict[str, Deflated]" = OrderedDict()
        for c in children:
            unique.setdefault(c.id, c)
        self.children = list(unique.values())
        self.content = make_object(kind, list(unique), body)
        self.id = object_id(self.content)

    def tree(self) -> pb.ObjectTree:
        return pb.ObjectTree(object_id=self.id, children=[c.tree() for c in self.children])

    def all_objects(self) -> "Dict[str, bytes]":
        """id -> bytes of this object and every descendant."""
        out: Dict[str, bytes] = {}
        stack = [self]
        while stack:
            o = stack.pop()
            out[o.id] = o.content
            stack.extend(o.children)
        return out


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def deflate_array(a: np.ndarray) -> Deflated:
    data = npy_bytes(a)
    chunks = [Deflated("ArrayChunk", [], data[i:i + MAX_CHUNK]) for i in range(0, len(data), MAX_CHUNK)]
    unique = list(OrderedDict((c.id, None) for c in chunks))
    meta = OrderedDict([("dtype", str(a.dtype)), ("shape", [int(d) for d in a.shape]),
                        ("stype", NUMPY_STYPE), ("arraychunk_ids", [unique.index(c.id) for c in chunks])])
    return Deflated("Array", chunks, json.dumps(meta).encode("utf-8"))


def _value_proto(value: Any, cls: type, allow: Tuple[type, ...]) -> pb.Message:
    """One record value as flwr writes it: bool before int, int as sint64 (uint64 above 2^63-1)."""
    items = value if isinstance(value, list) else [value]
    kinds = [t for t in (bool, int, float, str, bytes) if t in allow]
    for t in kinds:
        if items and all(isinstance(v, t) and (t is bool or not isinstance(v, bool)) for v in items):
            break
    else:
        raise TypeError("%s cannot hold %r" % (cls.__name__, value))
    big = t is int and any(v > 2 ** 63 - 1 for v in items)
    if isinstance(value, list):
        if t is int:
            return cls(uint_list=pb.UintList(vals=items)) if big else cls(
                sint_list=pb.SintList(vals=[pb.zigzag(v) for v in items]))
        lists = {bool: ("bool_list", pb.BoolList), float: ("double_list", pb.DoubleList),
                 str: ("string_list", pb.StringList), bytes: ("bytes_list", pb.BytesList)}
        name, lcls = lists[t]
        return cls(**{name: lcls(vals=[int(v) if t is bool else v for v in items])})
    if t is int:
        return cls(uint64=value) if big else cls(sint64=pb.zigzag(value))
    field = {bool: "bool", float: "double", str: "string", bytes: "bytes"}[t]
    return cls(**{field: int(value) if t is bool else value})


def deflate_record(rec: Record) -> Deflated:
    if isinstance(rec, ArrayRecord):
        arrays = [(name, deflate_array(np.asarray(a))) for name, a in rec.items()]
        body = json.dumps(OrderedDict((n, d.id) for n, d in arrays)).encode("utf-8")
        return Deflated("ArrayRecord", [d for _, d in arrays], body)
    if isinstance(rec, MetricRecord):
        msg = pb.MetricRecord(items=[pb.MetricRecordItem(key=k, value=_value_proto(v, pb.MetricRecordValue,
                                                                                    (int, float)))
                                     for k, v in rec.items()])
        return Deflated("MetricRecord", [], msg.SerializeToString())
    if isinstance(rec, ConfigRecord):
        msg = pb.ConfigRecord(items=[pb.ConfigRecordItem(key=k, value=_value_proto(
            v, pb.ConfigRecordValue, (bool, int, float, str, bytes))) for k, v in rec.items()])
        return Deflated("ConfigRecord", [], msg.SerializeToString())
    raise TypeError("not a record: %r" % type(rec).__name__)


def deflate_recorddict(content: "Dict[str, Record]") -> Deflated:
    records = [(name, deflate_record(r)) for name, r in content.items()]
    body = json.dumps(OrderedDict((n, d.id) for n, d in records)).encode("utf-8")
    return Deflated("RecordDict", [d for _, d in records], body)


def metadata(**values: Any) -> pb.Metadata:
    """A Metadata with only non-default fields set (what proto3 serialization writes)."""
    md = pb.Metadata()
    for k, v in values.items():
        if v is None or (k not in ("src_task_id", "dst_task_id") and not v):
            continue
        setattr(md, k, v)
    return md


def deflate_message(md: pb.Metadata, content: "Optional[Dict[str, Record]]" = None,
                    error: Optional[pb.Error] = None) -> Deflated:
    """A Message object: its body is the metadata (without message_id) and the error, if any."""
    body_md = pb.Metadata.FromString(md.SerializeToString())
    body_md.ClearField("message_id")
    body = pb.FlwrMessage(metadata=body_md, error=error).SerializeToString()
    kids = [deflate_recorddict(content)] if content is not None else []
    return Deflated("Message", kids, body)


# -- decoding (inflate) ------------------------------------------------------------------------------
Fetch = Callable[[str], bytes]


def _json_body(oid: str, kind: str, body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=OrderedDict)
    except ValueError as e:
        raise ObjectError("%s %s: body is not JSON (%s)" % (kind, oid, e)) from None


def _expect(oid: str, kind: str, want: str) -> None:
    if kind != want:
        raise ObjectError("object %s is a %r where a %s belongs" % (oid, kind, want))


def _refs(oid: str, kind: str, refs: Any, kids: List[str]) -> "OrderedDict[str, str]":
    if not isinstance(refs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in refs.items()):
        raise ObjectError("%s %s: body must map names to object ids" % (kind, oid))
    if set(refs.values()) != set(kids):
        raise ObjectError("%s %s: body refers to %s but its head lists children %s"
                          % (kind, oid, sorted(set(refs.values())), sorted(kids)))
    return refs


def record_refs(oid: str, kind: str, body: bytes, kids: List[str]) -> "OrderedDict[str, str]":
    """name -> child id of a RecordDict or ArrayRecord body, checked against the head's children."""
    return _refs(oid, kind, _json_body(oid, kind, body), kids)


class ArrayMeta:
    """What an Array object declares: dtype, shape, its chunks in order, and the bytes they must make."""

    __slots__ = ("dtype", "shape", "chunks", "nbytes")

    def __init__(self, dtype: np.dtype, shape: Tuple[int, ...], chunks: List[str], nbytes: int) -> None:
        self.dtype, self.shape, self.chunks, self.nbytes = dtype, shape, chunks, nbytes


def array_meta(oid: str, body: bytes, kids: List[str]) -> ArrayMeta:
    """An Array's metadata, refused (ObjectError, LimitError) before any chunk is fetched when it is
    malformed, not plain numeric, larger than pytrain's tensor limit, or lists more chunks than its
    ``.npy`` bytes could fill (every chunk holds at least one byte)."""
    meta = _json_body(oid, "Array", body)
    try:
        dtype, shape, stype, idx = meta["dtype"], meta["shape"], meta["stype"], meta["arraychunk_ids"]
        if not isinstance(shape, list) or not isinstance(idx, list) or len(shape) > MAX_DIMS:
            raise TypeError("shape and arraychunk_ids must be lists (shape of at most %d dims)" % MAX_DIMS)
        shape = tuple(int(d) for d in shape)
        order = [kids[int(i)] for i in idx]
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ObjectError("Array %s: malformed metadata (%s)" % (oid, e)) from None
    if stype != NUMPY_STYPE:
        raise ObjectError("Array %s: stype %r is not supported (only %r)" % (oid, stype, NUMPY_STYPE))
    legacy = dtype == "" and shape == ()  # flwr's legacy Parameters: only the .npy header says what it is
    if dtype not in _DTYPES and not legacy:
        raise ObjectError("Array %s: dtype %r is not a plain numeric dtype" % (oid, dtype))
    dt = None if legacy else np.dtype(dtype)
    nbytes = limits.max_tensor_bytes if dt is None else limits.check_tensor(shape, dt.itemsize, "Array %s" % oid) * dt.itemsize
    if not order or len(order) > nbytes + MAX_NPY_HEADER:
        raise ObjectError("Array %s: %d chunks cannot make the .npy bytes of a %s %s array (%d data bytes)"
                          % (oid, len(order), dtype, list(shape), nbytes))
    if set(order) != set(kids):
        raise ObjectError("Array %s: its chunk list names %d objects, its head %d"
                          % (oid, len(set(order)), len(set(kids))))
    return ArrayMeta(dt, shape, order, nbytes)


def npy_array(oid: str, data: "bytes | bytearray", meta: ArrayMeta) -> np.ndarray:
    """The array in ``.npy`` bytes whose header must say exactly ``meta``'s dtype and shape and whose
    data must be exactly that many bytes; decoded without np.load (never a pickle, never an
    allocation the header alone asks for)."""
    hshape, fortran, hdtype, offset = read_npy_header(data, "Array %s: its chunks" % oid, ObjectError)
    if meta.dtype is None:  # legacy: the header declares it, checked as metadata would have been
        if str(hdtype) not in _DTYPES:
            raise ObjectError("Array %s: dtype %r is not a plain numeric dtype" % (oid, str(hdtype)))
        n = limits.check_tensor(hshape, hdtype.itemsize, "Array %s" % oid) * hdtype.itemsize
        meta = ArrayMeta(hdtype, tuple(hshape), meta.chunks, n)
    if tuple(hshape) != meta.shape or hdtype != meta.dtype:
        raise ObjectError("Array %s: metadata says %s %s, the .npy header %s %s"
                          % (oid, meta.dtype, list(meta.shape), hdtype, list(hshape)))
    if len(data) - offset != meta.nbytes:
        raise ObjectError("Array %s: the .npy data holds %d bytes, a %s %s array needs %d"
                          % (oid, len(data) - offset, meta.dtype, list(meta.shape), meta.nbytes))
    a = np.frombuffer(data, dtype=meta.dtype, count=meta.nbytes // max(meta.dtype.itemsize, 1), offset=offset)
    return a.reshape(meta.shape[::-1]).T if fortran else a.reshape(meta.shape)


def inflate_array(oid: str, fetch: Fetch) -> np.ndarray:
    kind, kids, body = parse_object(oid, fetch(oid))
    _expect(oid, kind, "Array")
    meta = array_meta(oid, body, kids)
    data = bytearray()
    bodies: Dict[str, bytes] = {}
    for cid in meta.chunks:  # a repeated (deduplicated) chunk counts each time it is used
        if cid not in bodies:
            ckind, ckids, bodies[cid] = parse_object(cid, fetch(cid))
            _expect(cid, ckind, "ArrayChunk")
        check_chunk_total(oid, meta, len(data) + len(bodies[cid]))
        data += bodies[cid]
    return npy_array(oid, data, meta)


def check_chunk_total(oid: str, meta: ArrayMeta, total: int) -> None:
    """Refuse an Array whose chunks so far (``total`` bytes) exceed what its declared shape takes."""
    if total > meta.nbytes + MAX_NPY_HEADER:
        raise ObjectError("Array %s: its chunks add up to more than the %d bytes a %s %s array takes"
                          % (oid, meta.nbytes + MAX_NPY_HEADER, meta.dtype, list(meta.shape)))


def _value_from_proto(v: pb.Message) -> Any:
    for f in v.FIELDS:
        if v.HasField(f.name):
            x = getattr(v, f.name)
            if f.name == "sint64":
                return pb.unzigzag(x)
            if f.name == "bool":
                return bool(x)
            if f.name.endswith("_list"):
                vals = list(x.vals)
                if f.name == "sint_list":
                    return [pb.unzigzag(i) for i in vals]
                if f.name == "bool_list":
                    return [bool(i) for i in vals]
                return vals
            return x
    raise ObjectError("a record value has none of its oneof fields set")


def inflate_record(oid: str, fetch: Fetch) -> Record:
    kind, kids, body = parse_object(oid, fetch(oid))
    if kind == "ArrayRecord":
        refs = record_refs(oid, kind, body, kids)
        return ArrayRecord((name, inflate_array(aid, fetch)) for name, aid in refs.items())
    if kind in ("MetricRecord", "ConfigRecord"):
        if kids:
            raise ObjectError("%s %s cannot have children" % (kind, oid))
        cls = pb.MetricRecord if kind == "MetricRecord" else pb.ConfigRecord
        try:
            msg = cls.FromString(body)
            items = [(it.key, _value_from_proto(it.value)) for it in msg.items]
        except (ModelFormatError, AttributeError) as e:
            raise ObjectError("%s %s: malformed protobuf body (%s)" % (kind, oid, e)) from None
        return (MetricRecord if kind == "MetricRecord" else ConfigRecord)(items)
    raise ObjectError("object %s is a %r where a record belongs" % (oid, kind))


def inflate_message(oid: str, fetch: Fetch) -> Tuple[pb.FlwrMessage, "Optional[OrderedDict[str, Record]]"]:
    """(the Message proto with metadata/error, its content as name -> record or None)."""
    kind, kids, body = parse_object(oid, fetch(oid))
    _expect(oid, kind, "Message")
    try:
        msg = pb.FlwrMessage.FromString(body)
    except ModelFormatError as e:
        raise ObjectError("Message %s: malformed protobuf body (%s)" % (oid, e)) from None
    if not kids:
        return msg, None
    if len(kids) != 1:
        raise ObjectError("Message %s has %d children; a message has one RecordDict" % (oid, len(kids)))
    rid = kids[0]
    rkind, rkids, rbody = parse_object(rid, fetch(rid))
    _expect(rid, rkind, "RecordDict")
    refs = record_refs(rid, rkind, rbody, rkids)
    return msg, OrderedDict((name, inflate_record(r, fetch)) for name, r in refs.items())


def tree_ids(tree: pb.ObjectTree) -> List[str]:
    """Every id in a tree, children before parents, each once."""
    out: "OrderedDict[str, None]" = OrderedDict()

    def walk(t: pb.ObjectTree, depth: int) -> None:
        if depth > 16:
            raise ObjectError("object tree nested deeper than any Flower message")
        for c in t.children:
            walk(c, depth + 1)
        out[t.object_id] = None
    walk(tree, 0)
    return list(out)
