"""Layer 9, webapp: a run resumed on the WebGPU device from a checkpoint the worker holds outside the wasm heap (the
last good one, streamed at an epoch's end: :mod:`pytrain.webapp.gpu_save`) while the optimizer state lives on the
GPU only (:func:`pytrain.webapp.gpu_slices.check_heap`). The worker hands the checkpoint over range by range as
asked: the zip's directory, then member by member, each checked as :func:`pytrain.checkpoint.decode` checks it
(checksums, headers, shapes against the manifest). The parameters are copied into the heap's CheckpointState, each
optimizer moment goes up to the GPU alone and is let go: the heap never holds the checkpoint whole, nor the state.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Dict, Generator, Optional, Tuple

import numpy as np

from pytrain.checkpoint.zip_format import MEMBERS, check_manifest, manifest_contents, member_array
from pytrain.errors import CheckpointError
from pytrain.ops.wasm.address import ptr

#: a range of the checkpoint's bytes asked for, [start, end)
Range = Tuple[int, int]
Reader = Generator[Range, np.ndarray, Any]

_END = b"PK\x05\x06"   # the zip's end of central directory record (22 bytes and a comment of up to 65535)
_CENTRAL = "<IHHHHHHIIIHHHHHII"   # a central directory entry's 46 bytes


def _bad(why: str) -> CheckpointError:
    return CheckpointError("the checkpoint the worker holds is corrupted or not a pytrain checkpoint: %s" % why)


class LoadStream:
    """One streamed resume of ``size`` bytes: :meth:`ask` says which range of the checkpoint the worker's JS copies
    into the heap where (a box of its own), :meth:`next` takes it once there and asks for the next. ``install``
    (called with the checkpoint's properties and optimizer step once the parameters are in) returns the
    put(param, slot, array) that sends each moment up to the GPU."""

    def __init__(self, size: int, params: Dict[str, Any], install: Callable[[Any, int], Callable]) -> None:
        self._params, self._install = params, install
        self._run = self._load(int(size))
        self._want: Range = next(self._run)
        self._box: Optional[np.ndarray] = None
        #: the largest range held at once (bytes)
        self.held = 0

    def ask(self) -> Dict[str, Any]:
        """{"want": [start, end], "into": the heap address the JS copies those bytes to}."""
        start, end = self._want
        if not 0 <= start <= end:
            raise _bad("it asks for the range %s" % (self._want,))
        self._box = np.empty(end - start, np.uint8)
        self.held = max(self.held, self._box.nbytes)
        return {"want": [start, end], "into": ptr(self._box)}

    def next(self) -> Dict[str, Any]:
        """The range asked for has landed in its box: the next range asked for, or {"done": True}."""
        box, self._box = self._box, None
        if box is None:
            raise _bad("no range was asked for")
        try:
            self._want = self._run.send(box)
        except StopIteration:
            return {"done": True}
        return self.ask()

    def _load(self, size: int) -> Reader:
        members = yield from _directory(size)
        def read(name: str) -> Reader:
            if name not in members:
                raise _bad("the archive has no member %r" % name)
            return (yield from _member(members[name], name))
        body, checksum = bytes((yield from read(MEMBERS[0]))), bytes((yield from read(MEMBERS[1])))
        nominal, properties, opt, reads = manifest_contents(check_manifest(body, checksum, "(streamed)", _bad), _bad)
        for name, q in nominal.items():   # (the checkpoint's parameters are this model's, as they are)
            p = self._params.get(name)
            if p is None or q.data is None or q.shape != p.data.shape or q.dtype != p.data.dtype:
                raise _bad("parameter %r (%s) is not one of this model's, stored" % (name, q))
        if len(nominal) != len(self._params):
            raise _bad("it holds %d of the model's %d parameters" % (len(nominal), len(self._params)))
        for name, p in self._params.items():
            file, sha, what, shape, dtype = reads[id(nominal[name].data)]
            np.copyto(p.data, member_array((yield from read(file)), sha, what, shape, dtype, _bad, copy=False))
        put = self._install(properties, opt.step if opt is not None else 0)
        for name, slots in (opt.slots if opt is not None else {}).items():
            for slot, a in slots.items():
                file, sha, what, shape, dtype = reads[id(a)]
                put(name, slot, member_array((yield from read(file)), sha, what, shape, dtype, _bad, copy=False))


def _directory(size: int) -> Reader:
    """{member name: (method, stored size, size, local header offset)} from the zip's end record and directory."""
    tail_at = max(0, size - 22 - 65535)
    tail = bytes((yield (tail_at, size)))
    k = tail.rfind(_END)
    if k < 0 or len(tail) - k < 22:
        raise _bad("no zip end record in its last %d bytes (%d bytes; truncated?)" % (len(tail), size))
    n, cd_size, cd_at = struct.unpack("<HII", tail[k + 10:k + 20])
    if cd_at + cd_size > tail_at + k:
        raise _bad("the zip directory lies past its end record")
    cd = tail[cd_at - tail_at:cd_at - tail_at + cd_size] if cd_at >= tail_at \
        else bytes((yield (cd_at, cd_at + cd_size)))
    members: Dict[str, Tuple[int, int, int, int]] = {}
    pos = 0
    for _ in range(n):
        if pos + 46 > len(cd):
            raise _bad("the zip directory is shorter than its %d entries" % n)
        f = struct.unpack(_CENTRAL, cd[pos:pos + 46])
        name = cd[pos + 46:pos + 46 + f[10]].decode("utf-8", "replace")
        if f[0] != 0x02014B50 or name in members:
            raise _bad("zip directory entry %d is malformed or a duplicate (%r)" % (len(members), name))
        members[name] = (f[4], f[8], f[9], f[16])
        pos += 46 + f[10] + f[11] + f[12]
    return members


def _member(entry: Tuple[int, int, int, int], name: str) -> Reader:
    """A stored member's bytes: its local header (for where its data begins), then the data."""
    method, stored, size, at = entry
    if method != 0 or stored != size:
        raise _bad("member %r is compressed (method %d): pytrain's checkpoints store theirs" % (name, method))
    head = bytes((yield (at, at + 30)))
    if head[:4] != b"PK\x03\x04":
        raise _bad("member %r has no local header at %d" % (name, at))
    start = at + 30 + sum(struct.unpack("<HH", head[26:30]))
    return (yield (start, start + size))
