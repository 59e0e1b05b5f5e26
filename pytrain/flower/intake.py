"""Fetching a message's objects from the SuperLink top down, each declared size checked first.

A server (or anything between it and the node) decides what a message declares: how many records,
which arrays of what shape, how many chunks. Nothing is fetched on trust: the Message, its RecordDict
and records and each Array's metadata come first (small objects), each checked against its place in
the object tree; the arrays' names, shapes and dtypes are then checked against the model (the
trainer's ``check_declared``) and pytrain's limits; only then are chunks fetched, one at a time,
and an array whose chunks (a deduplicated chunk counts each time it is used) add up to more bytes
than its declared shape takes is refused at the chunk that overflows. What may arrive is therefore
bounded by the model's size, not by what the server claims.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple

from pytrain.base import limits
from pytrain.errors import ModelFormatError
from pytrain.flower import messages as pb
from pytrain.flower import objects as ob
from pytrain.proto import wire

#: records a message may carry (flwr's train/evaluate messages carry two or three)
MAX_RECORDS = 64
#: name -> (shape, dtype name) of an ArrayRecord's arrays, as their metadata declares them
Declared = Dict[str, Tuple[Tuple[int, ...], str]]
#: a Fleet pull-object call: object id -> steps returning its bytes
Pull = Callable[[str], Any]


def fetch_message(tree: pb.ObjectTree, pull: Pull,
                  check: Optional[Callable[[Declared], Any]] = None) -> Any:
    """Steps that fetch the message ``tree`` describes; returns id -> bytes for
    :func:`pytrain.flower.objects.inflate_message`. ``check`` sees each ArrayRecord's declared arrays
    before any of their chunks is fetched and raises to refuse them."""
    cache: Dict[str, bytes] = {}
    seen = [0]

    def get(t: pb.ObjectTree, kinds: Tuple[str, ...]) -> Any:
        oid = t.object_id
        if oid not in cache:
            cache[oid] = yield from pull(oid)
            seen[0] += len(cache[oid])
            limits.check_file(seen[0], "the message's objects")
        kind, kids, body = ob.parse_object(oid, cache[oid])
        if kind not in kinds:
            raise ob.ObjectError("object %s is a %r where a %s belongs" % (oid, kind, " or ".join(kinds)))
        listed = [c.object_id for c in t.children]
        if len(listed) != len(kids) or set(listed) != set(kids):
            raise ob.ObjectError("%s %s: the object tree lists %d children, its head %d (or other ones)"
                                 % (kind, oid, len(listed), len(kids)))
        return kind, kids, body

    _, kids, _ = yield from get(tree, ("Message",))
    if len(kids) > 1:
        raise ob.ObjectError("Message %s has %d children; a message has one RecordDict" % (tree.object_id, len(kids)))
    for rd in tree.children:
        kind, kids, body = yield from get(rd, ("RecordDict",))
        if len(kids) > MAX_RECORDS:
            raise ob.ObjectError("RecordDict %s holds %d records (at most %d)" % (rd.object_id, len(kids), MAX_RECORDS))
        ob.record_refs(rd.object_id, kind, body, kids)
        for rec in rd.children:
            kind, kids, body = yield from get(rec, ("ArrayRecord", "MetricRecord", "ConfigRecord"))
            if kind == "ArrayRecord":
                yield from _fetch_arrays(rec, ob.record_refs(rec.object_id, kind, body, kids), get, check)
            elif kids:
                raise ob.ObjectError("%s %s cannot have children" % (kind, rec.object_id))
    return cache


def _fetch_arrays(rec: pb.ObjectTree, refs: "OrderedDict[str, str]", get, check) -> Any:
    nodes = {t.object_id: t for t in rec.children}
    metas: "List[Tuple[pb.ObjectTree, ob.ArrayMeta]]" = []
    declared: Declared = OrderedDict()
    total = 0
    for name, aid in refs.items():
        _, kids, body = yield from get(nodes[aid], ("Array",))
        meta = ob.array_meta(aid, body, kids)
        total += 0 if meta.dtype is None else meta.nbytes  # legacy (no dtype): bounded by what arrives
        limits.check_file(total, "ArrayRecord %s (its arrays together)" % rec.object_id)
        declared[name] = (meta.shape, "" if meta.dtype is None else str(meta.dtype))
        metas.append((nodes[aid], meta))
    if check is not None:
        check(declared)  # names, shapes, dtypes against the model: before any chunk
    for t, meta in metas:
        chunks = {c.object_id: c for c in t.children}
        sizes: Dict[str, int] = {}
        got = 0
        for cid in meta.chunks:
            if cid not in sizes:
                _, _, body = yield from get(chunks[cid], ("ArrayChunk",))
                sizes[cid] = len(body)
            got += sizes[cid]
            ob.check_chunk_total(t.object_id, meta, got)


def metadata_in_head(head: "bytes | memoryview") -> "List[pb.Metadata]":
    """The metadata of the messages (at most :data:`MAX_RECORDS`) that begin in ``head``, the first
    bytes of a pull-messages answer too large to read: each can then get an error reply. A message's
    metadata is its first field (as flwr writes it); one cut off or malformed is passed over."""
    found: "List[pb.Metadata]" = []
    pos, end = 0, len(head)
    try:
        while pos < end and len(found) < MAX_RECORDS:
            key, pos = wire.read_varint(head, pos, end)
            if key & 7 != wire.LEN:  # PullMessagesResponse holds messages only
                break
            size, pos = wire.read_varint(head, pos, end)
            if key >> 3 == 2:  # messages_list: a FlwrMessage, metadata (field 1) first
                md_key, at = wire.read_varint(head, pos, end)
                md_size, at = wire.read_varint(head, at, end)
                if md_key == (1 << 3) | wire.LEN and at + md_size <= min(end, pos + size):
                    md = pb.Metadata.FromString(head[at:at + md_size])
                    if md.message_id and md.message_type:
                        found.append(md)
            pos += size
    except ModelFormatError:
        pass  # the head ends or goes wrong here: what was found before stands
    return found
