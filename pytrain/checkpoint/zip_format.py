"""pytrain's checkpoint format.

On disk a checkpoint is a plain zip archive, inspectable with ordinary tools: ``manifest.json`` says what
is inside (names, shapes, dtypes, SHA-256 of every array) and each array is a ``.npy`` file
(``numpy.load`` reads it). Reading verifies every checksum, so a corrupted or truncated file is
refused instead of yielding garbage weights; writing is atomic (write, then rename).
"""
from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from pytrain.base import limits
from pytrain.checkpoint.values import OptimizerState, Parameter, Properties, Property
from pytrain.errors import CheckpointError, LimitError

FORMAT = "pytrain.checkpoint"
VERSION = 1
_MANIFEST = "manifest.json"
_MANIFEST_SUM = "manifest.sha256"
#: the manifest's members (read first by a reader streaming the rest)
MEMBERS = (_MANIFEST, _MANIFEST_SUM)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)  # ascontiguousarray would make 0-d arrays 1-d
    return buf.getvalue()


def encode(parameters: Mapping[str, Parameter], properties: Mapping[str, Property],
           optimizer: Optional[OptimizerState]) -> bytes:
    """Serialize to the zip format described in the module docstring."""
    return b"".join(bytes(p) for member in encode_chunks(parameters, properties, optimizer) for p in member)


def encode_chunks(parameters: Mapping[str, Parameter], properties: Mapping[str, Property],
                  optimizer: Optional[OptimizerState]) -> Iterator[List[Any]]:
    """:func:`encode`'s bytes in pieces (bytes or memoryviews over the arrays themselves, no copy), a list yielded
    after each member is written (the last: the manifest and the archive's directory): a writer holding one array
    at a time streams a checkpoint larger than its memory. Each array is read when its member is written
    (``optimizer.slots[p][slot]`` one slot at a time, in sorted order), so the mapping may fetch it then."""
    sink = _Sink()
    manifest: Dict[str, Any] = {"format": FORMAT, "version": VERSION, "parameters": [],
                                "properties": dict(properties), "optimizer": None}
    def member(path: str) -> zipfile.ZipInfo:
        # a fixed date: the same state always gives the same bytes (caches, diffs, hashes)
        return zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))

    z = zipfile.ZipFile(sink, "w", zipfile.ZIP_STORED)
    def put(path: str, array: np.ndarray) -> str:
        pieces = _npy_pieces(array)
        info = member(path)
        info.file_size = sum(len(p) for p in pieces)   # (as writestr sets it: the same header)
        digest = hashlib.sha256()
        with z.open(info, "w") as dest:
            for piece in pieces:
                dest.write(piece)
                digest.update(piece)
        return digest.hexdigest()

    for i, p in enumerate(parameters.values()):
        entry = {"name": p.name, "shape": list(p.shape), "dtype": p.dtype.str,
                 "requires_grad": bool(p.requires_grad), "file": None, "sha256": None}
        if p.data is not None:
            entry["file"] = "parameters/%04d.npy" % i
            entry["sha256"] = put(entry["file"], p.data)
            yield sink.take()
        manifest["parameters"].append(entry)
    if optimizer is not None:
        slots = []
        for i, pname in enumerate(sorted(optimizer.slots)):
            states = optimizer.slots[pname]
            for slot in sorted(states):
                path = "optimizer/%04d.%s.npy" % (i, slot)
                slots.append({"param": pname, "slot": slot, "file": path, "sha256": put(path, states[slot])})
                yield sink.take()
        manifest["optimizer"] = {"step": int(optimizer.step), "learning_rate": optimizer.learning_rate,
                                 "state": slots}
    body = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
    z.writestr(member(_MANIFEST), body)
    z.writestr(member(_MANIFEST_SUM), hashlib.sha256(body).hexdigest())
    z.close()
    yield sink.take()


def _npy_pieces(a: np.ndarray) -> List[Any]:
    """``_npy(a)`` as pieces: the header, then the array's own bytes (a view) when it is C-contiguous."""
    a = np.asarray(a)
    if not a.flags.c_contiguous or a.dtype.hasobject:
        return [_npy(a)]
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(a))
    return [head.getvalue(), memoryview(a.reshape(-1).view(np.uint8))]


class _Sink:
    """A seekable output for zipfile that hands its bytes on member by member (:meth:`take`): zipfile seeks back
    only to rewrite the header of the member it is writing, which is still held."""

    def __init__(self) -> None:
        self._pieces: List[Tuple[int, Any]] = []   # (offset, bytes) not taken yet
        self._end = 0
        self._pos = 0

    def write(self, data: Any) -> int:
        n = len(data)
        if self._pos == self._end:
            self._pieces.append((self._pos, data if isinstance(data, (bytes, memoryview)) else bytes(data)))
            self._end += n
        else:   # a header rewritten in place: the very piece, same length
            k = next(k for k, (at, old) in enumerate(self._pieces) if at == self._pos and len(old) == n)
            self._pieces[k] = (self._pos, bytes(data))
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._end + pos if whence == 2 else self._pos + pos
        return self._pos

    def flush(self) -> None:
        pass

    def take(self) -> List[Any]:
        out = [p for _, p in self._pieces]
        self._pieces = []
        return out


#: dtypes a checkpoint array may have (numbers and booleans: never objects, which would need pickle)
_ARRAY_KINDS = "biuf"
#: the manifest is small JSON; anything bigger is not a checkpoint pytrain wrote
_MANIFEST_MAX_BYTES = 64 << 20
def _codec_errors() -> tuple:
    errors = []
    try:  # (Pyodide's Python may be built without lzma)
        import lzma
        errors.append(lzma.LZMAError)
    except ImportError:
        pass
    return tuple(errors)


#: the errors zipfile and its codecs raise on damaged archives (flipped flags, methods, sizes, CRCs)
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, EOFError, ValueError, OSError,
               NotImplementedError, RuntimeError, zlib.error, struct.error, OverflowError,
               UnicodeDecodeError) + _codec_errors()


class _Archive:
    """A checkpoint zip, read defensively: every member size is checked before reading, and reads are
    bounded whatever the central directory claims (zip bombs, lying sizes)."""

    def __init__(self, data: bytes, bad: Any) -> None:
        self._bad = bad
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except _ZIP_ERRORS as e:
            raise bad("%s (%d bytes; truncated or not a zip archive?)" % (e or type(e).__name__, len(data))) from None
        names = [i.filename for i in infos]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise bad("the archive holds %s more than once" % ", ".join(dupes))
        self._infos = {i.filename: i for i in infos}

    def read(self, path: str, what: str, limit: int) -> bytes:
        info = self._infos.get(path)
        if info is None:
            raise self._bad("%s: the archive has no member %r" % (what, path))
        if info.file_size > limit:
            raise LimitError("checkpoint member %r (%s) declares %d bytes, over the limit of %d bytes; raise it "
                             "with pytrain.base.limits.set_limits(max_file_bytes=...)" % (path, what, info.file_size, limit))
        try:
            with self._zip.open(info) as f:
                raw = f.read(info.file_size + 1)  # bounded by what was declared, whatever it inflates to
        except _ZIP_ERRORS as e:
            raise self._bad("%s: %s" % (what, e or type(e).__name__)) from None
        if len(raw) != info.file_size:
            raise self._bad("%s: member %r holds %s bytes, but the archive declares %d"
                            % (what, path, "more than %d" % info.file_size if len(raw) > info.file_size
                                           else str(len(raw)), info.file_size))
        return raw


def read_npy_header(raw: "bytes | bytearray", what: str, bad: Any) -> Tuple[Tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, data offset) of ``.npy`` bytes, read without touching the data
    (``bad``: the exception class a malformed header raises, naming ``what``)."""
    f = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError("unknown .npy version %s" % (version,))
    except (ValueError, SyntaxError, TypeError, EOFError, OverflowError, OSError, struct.error) as e:
        raise bad("%s: not a valid .npy array (%s)" % (what, e)) from None
    return tuple(shape), bool(fortran), dtype, f.tell()


def _npy_head(raw: memoryview) -> bytes:
    """A buffer's .npy magic and header alone as bytes (not the whole array copied into the BytesIO that reads it):
    its length is a 2-byte field after the magic in version 1, 4 bytes in later ones."""
    wide = raw[6:7].tobytes() not in (b"", b"\x01")
    n = (12 + int.from_bytes(raw[8:12].tobytes(), "little")) if wide else (10 + int.from_bytes(raw[8:10].tobytes(),
                                                                                             "little"))
    return bytes(raw[:n])


def _read_npy(raw: bytes, what: str, bad: Any, copy: bool = True) -> np.ndarray:
    """A .npy array of numbers, its header checked (dtype, size) before any data is touched; without ``copy`` a
    read-only view of ``raw`` where its byte order is the machine's."""
    head = raw if isinstance(raw, bytes) else _npy_head(memoryview(raw))
    shape, fortran, dtype, offset = read_npy_header(head, what, bad)
    if dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
        raise bad("%s: arrays of dtype %s are not allowed in a checkpoint (numbers only; never unpickled)"
                  % (what, dtype))
    count = limits.check_tensor(shape, dtype.itemsize, what)
    body = raw[offset:]
    if len(body) != count * dtype.itemsize:
        raise bad("%s: the .npy header declares shape %s of %s (%d bytes) but holds %d bytes"
                  % (what, list(shape), dtype, count * dtype.itemsize, len(body)))
    arr = np.frombuffer(body, dtype=dtype)
    arr = arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
    return np.array(arr, dtype=dtype.newbyteorder("="), copy=copy)


def member_array(raw: bytes, sha: Any, what: str, shape: tuple, dtype: np.dtype, bad: Any,
                 copy: bool = True) -> np.ndarray:
    """A checkpoint member's array as :func:`decode` reads each: its checksum, ``.npy`` header, shape and dtype
    checked against the manifest's (``bad``: the exception class, naming ``what``); without ``copy`` a read-only
    view of ``raw`` where it can be (a reader streaming members one at a time)."""
    if not isinstance(sha, str) or hashlib.sha256(raw).hexdigest() != sha:
        raise bad("%s: checksum mismatch" % what)
    arr = _read_npy(raw, what, bad, copy)
    if arr.shape != shape or arr.dtype != dtype:
        raise bad("%s: the array is %s %s but the manifest says %s %s"
                  % (what, list(arr.shape), arr.dtype, list(shape), dtype))
    return arr


def _field(entry: Any, key: str, kinds: Any, what: str, bad: Any, optional: bool = False) -> Any:
    if not isinstance(entry, dict):
        raise bad("%s is not a JSON object" % what)
    if key not in entry:
        if optional:
            return None
        raise bad("%s has no %r" % (what, key))
    value = entry[key]
    if optional and value is None:
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise bad("%s: %r must be %s, got %r" % (what, key, _kind_names(kinds), value))
    if not isinstance(value, kinds):
        raise bad("%s: %r must be %s, got %r" % (what, key, _kind_names(kinds), value))
    return value


def _kind_names(kinds: Any) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join({int: "an integer", float: "a number", str: "a string", bool: "true/false",
                        list: "a list", dict: "an object"}.get(k, k.__name__) for k in kinds)


def _shape(value: Any, what: str, bad: Any) -> tuple:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise bad("%s: shape must be a list of non-negative integers, got %r" % (what, value))
    return tuple(value)


def _dtype(value: Any, what: str, bad: Any) -> np.dtype:
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError):
        raise bad("%s: unknown dtype %r" % (what, value)) from None
    if dt.kind not in _ARRAY_KINDS or dt.hasobject:
        raise bad("%s: dtype %s is not a number type" % (what, dt))
    return dt


def decode(data: bytes, label: str) -> "tuple[OrderedDict[str, Parameter], Properties, Optional[OptimizerState]]":
    """Parse and verify a checkpoint; CheckpointError names ``label`` and what is wrong.

    Everything is checked before it is used: the archive (no duplicate members, bounded sizes), the
    manifest's schema, each array's header, checksum, shape and dtype against the manifest, and the
    optimizer state against the parameters it belongs to.
    """
    def bad(why: str) -> CheckpointError:
        return CheckpointError("checkpoint %s is corrupted or not a pytrain checkpoint: %s" % (label, why))

    limits.check_file(len(data), "checkpoint %s" % label)
    z = _Archive(data, bad)
    manifest = _manifest(z, label, bad)

    def get(path: Any, sha: Any, what: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
        _check_ref(path, sha, what, bad)
        return member_array(z.read(path, what, limits.max_file_bytes), sha, what, shape, dtype, bad)

    return _contents(manifest, get, bad)


def _check_ref(path: Any, sha: Any, what: str, bad: Callable[[str], CheckpointError]) -> None:
    if not isinstance(path, str) or not isinstance(sha, str):
        raise bad("%s: 'file' and 'sha256' must be strings" % what)


def _contents(manifest: Dict[str, Any], get: Callable[..., np.ndarray], bad: Callable[[str], CheckpointError]
              ) -> "tuple[OrderedDict[str, Parameter], Properties, Optional[OptimizerState]]":
    """decode's contents from the manifest, each member's array read by ``get``."""
    params = _parameters(manifest, get, bad)
    o = manifest.get("optimizer")
    opt = _optimizer_state(o, params, get, bad) if o is not None else None
    props = _field(manifest, "properties", dict, "the manifest", bad, optional=True) or {}
    try:
        properties = Properties(props)
    except CheckpointError as e:
        raise bad(str(e)) from None
    return params, properties, opt


#: a member decode reads: (file, sha256, what, shape, dtype)
MemberRead = Tuple[Any, Any, str, tuple, np.dtype]
#: what decode makes of a checkpoint: its parameters, properties and optimizer state
Contents = Tuple["OrderedDict[str, Parameter]", Properties, Optional[OptimizerState]]


def manifest_contents(manifest: Dict[str, Any], bad: Callable[[str], CheckpointError]
                      ) -> Tuple["OrderedDict[str, Parameter]", Properties, Optional[OptimizerState],
                                 Dict[int, MemberRead]]:
    """What :func:`decode` makes of a checked manifest (:func:`check_manifest`), checked as it checks it, without
    reading a member: the parameters and the optimizer state hold shape-only placeholders (zero bytes each), and
    the member each placeholder stands for is ``reads[id(placeholder)]`` (to read with :func:`member_array`): for
    a reader that fetches the members one at a time (a checkpoint outside the heap)."""
    reads: Dict[int, MemberRead] = {}

    def placeholder(path: Any, sha: Any, what: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
        _check_ref(path, sha, what, bad)
        a = np.broadcast_to(np.zeros((), dtype), shape)
        reads[id(a)] = (path, sha, what, shape, dtype)
        return a

    return _contents(manifest, placeholder, bad) + (reads,)


def _manifest(z: "_Archive", label: str, bad: Callable[[str], CheckpointError]) -> Dict[str, Any]:
    """The archive's manifest, its checksum, format and version checked."""
    return check_manifest(z.read(_MANIFEST, "the manifest", _MANIFEST_MAX_BYTES),
                          z.read(_MANIFEST_SUM, "the manifest checksum", 256), label, bad)


def check_manifest(body: bytes, checksum: bytes, label: str, bad: Callable[[str], CheckpointError]) -> Dict[str, Any]:
    """The manifest (members ``manifest.json`` and ``manifest.sha256``: :data:`MEMBERS`), its checksum, format and
    version checked as :func:`decode` does."""
    try:
        expected = checksum.decode("ascii").strip()
    except UnicodeDecodeError:
        raise bad("the manifest checksum is not text") from None
    if hashlib.sha256(body).hexdigest() != expected:
        raise bad("manifest checksum mismatch")
    try:
        manifest = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise bad("manifest is not JSON (%s)" % (e if not isinstance(e, RecursionError) else "nested too deep")) from None
    if not isinstance(manifest, dict):
        raise bad("the manifest is not a JSON object")
    if manifest.get("format") != FORMAT:
        raise bad("format is %r, expected %r" % (manifest.get("format"), FORMAT))
    if manifest.get("version") != VERSION:
        raise CheckpointError("checkpoint %s has format version %r; this pytrain reads version %d"
                              % (label, manifest.get("version"), VERSION))
    return manifest


def _parameters(manifest: Dict[str, Any], get: Callable[..., np.ndarray],
                bad: Callable[[str], CheckpointError]) -> "OrderedDict[str, Parameter]":
    """The manifest's parameters, each array read by ``get`` (checked against the entry's shape and dtype)."""
    params: "OrderedDict[str, Parameter]" = OrderedDict()
    entries = _field(manifest, "parameters", list, "the manifest", bad)
    for k, e in enumerate(entries):
        name = _field(e, "name", str, "parameter entry %d" % k, bad)
        what = "parameter %r" % name
        if name in params:
            raise bad("%s is listed twice" % what)
        shape = _shape(_field(e, "shape", list, what, bad), what, bad)
        dtype = _dtype(_field(e, "dtype", str, what, bad), what, bad)
        requires_grad = _field(e, "requires_grad", bool, what, bad)
        file = _field(e, "file", str, what, bad, optional=True)
        arr = get(file, e.get("sha256"), what, shape, dtype) if file is not None else None
        params[name] = Parameter(name, arr, requires_grad, shape, dtype)
    return params


def _optimizer_state(o: Any, params: "OrderedDict[str, Parameter]", get: Callable[..., np.ndarray],
                     bad: Callable[[str], CheckpointError]) -> OptimizerState:
    """The manifest's optimizer state ``o``, each slot checked against the parameter it belongs to."""
    step = _field(o, "step", int, "the optimizer state", bad)
    if step < 0:
        raise bad("the optimizer step is %d, expected 0 or more" % step)
    lr = _field(o, "learning_rate", (int, float), "the optimizer state", bad, optional=True)
    if lr is not None and not (np.isfinite(lr) and lr >= 0):
        raise bad("the optimizer's learning rate is %r, expected a finite number >= 0" % (lr,))
    slots: Dict[str, Dict[str, np.ndarray]] = {}
    for k, s in enumerate(_field(o, "state", list, "the optimizer state", bad)):
        pname = _field(s, "param", str, "optimizer state entry %d" % k, bad)
        slot = _field(s, "slot", str, "optimizer state entry %d" % k, bad)
        what = "optimizer state %s of %r" % (slot, pname)
        p = params.get(pname)
        if p is None:
            raise bad("%s belongs to no parameter of the checkpoint" % what)
        if slot in slots.get(pname, {}):
            raise bad("%s is listed twice" % what)
        slots.setdefault(pname, {})[slot] = get(s.get("file"), s.get("sha256"), what, p.shape, p.dtype)
    return OptimizerState(step, None if lr is None else float(lr), slots)
