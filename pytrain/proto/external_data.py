"""ONNX external data: tensors whose bytes live in a side file (``data_location = EXTERNAL``).

torch's default (dynamo) exporter writes ``m.onnx`` plus ``m.onnx.data`` even for a small MLP.
Each external tensor names its file (``location``, relative to the model's folder) and where its
bytes sit in it (``offset``, ``length``). :func:`load_external_data` reads them into the tensors
(as ``raw_data``), so the rest of pytrain sees a self-contained model.

A model file is untrusted input: a location that is absolute, climbs out with ``..``, or resolves
(through symbolic links) outside the model's folder is refused, as is a missing file, a range
past the end of the file, or a byte count that does not match the tensor's shape and type.
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterator, Mapping, Optional, Tuple

from pytrain.base import dtypes
from pytrain.errors import ModelFormatError
from pytrain.proto.onnx_pb import GraphProto, ModelProto, TensorProto

__all__ = ["EXTERNAL", "external_tensors", "load_external_data"]

EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
_DRIVE = re.compile(r"^[A-Za-z]:")


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    for t in graph.initializer:
        yield t
    for sp in graph.sparse_initializer:
        for t in (sp.values, sp.indices):
            if t is not None:
                yield t
    for n in graph.node:
        for a in n.attribute:
            if a.t is not None:
                yield a.t
            for t in a.tensors:
                yield t
            if a.g is not None:
                for t in _graph_tensors(a.g):
                    yield t
            for sub in a.graphs:
                for t in _graph_tensors(sub):
                    yield t


def _is_external(t: TensorProto) -> bool:
    return t.data_location == EXTERNAL or bool(t.external_data)


def external_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """The tensors of ``model`` (initializers, Constant values, subgraphs) that keep their data outside."""
    if model.graph is None:
        return iter(())
    return (t for t in _graph_tensors(model.graph) if _is_external(t))


def _entries(t: TensorProto) -> Tuple[str, int, Optional[int]]:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if not location:
        raise ModelFormatError("tensor %r is stored as external data but names no location" % t.name)
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise ModelFormatError("tensor %r: external data offset/length %r/%r are not integers"
                               % (t.name, info.get("offset"), info.get("length"))) from None
    if offset < 0 or (length is not None and length < 0):
        raise ModelFormatError("tensor %r: external data offset %d / length %s is negative" % (t.name, offset, length))
    return location, offset, length


def _check_location(name: str, location: str) -> str:
    """The location as a relative path with '/' separators; refuses one that leaves the folder."""
    if location.startswith(("/", "\\")) or _DRIVE.match(location) or os.path.isabs(location):
        raise ModelFormatError("tensor %r: external data location %r is an absolute path; ONNX external data "
                               "lives in the model's folder (a relative location)" % (name, location))
    parts = re.split(r"[\\/]+", location)
    if ".." in parts:
        raise ModelFormatError("tensor %r: external data location %r contains '..' and would leave the "
                               "model's folder" % (name, location))
    if "\0" in location:
        raise ModelFormatError("tensor %r: external data location %r contains a NUL byte" % (name, location))
    return "/".join(p for p in parts if p not in ("", "."))


def _expected_bytes(t: TensorProto) -> int:
    if t.data_type == dtypes.STRING:
        raise ModelFormatError("tensor %r: a STRING tensor cannot be stored as external data" % t.name)
    count = 1
    for d in t.dims:
        if int(d) < 0:
            raise ModelFormatError("tensor %r has a negative dimension in its shape %s" % (t.name, list(t.dims)))
        count *= int(d)
    return dtypes.storage_bytes(t.data_type, count)


class _Source:
    """Reads byte ranges of external-data files from a folder or from a {location: bytes} mapping."""

    def __init__(self, base_dir: Optional[str], files: Optional[Mapping[str, bytes]]) -> None:
        self.base_dir = base_dir
        self.files: Dict[str, bytes] = {}
        for k, v in (files or {}).items():
            key = str(k).replace("\\", "/")
            while key.startswith("./"):
                key = key[2:]
            self.files[key] = bytes(v)
        self._cache: Dict[str, bytes] = {}

    def _from_mapping(self, name: str, location: str, rel: str) -> Optional[bytes]:
        for key in (location, rel):
            if key in self.files:
                return self.files[key]
        base = rel.rsplit("/", 1)[-1]
        same = [k for k in self.files if k.replace("\\", "/").rsplit("/", 1)[-1] == base]
        if len(same) == 1:  # a browser upload keeps file names only
            return self.files[same[0]]
        return None

    def data(self, name: str, location: str) -> bytes:
        rel = _check_location(name, location)
        if rel in self._cache:
            return self._cache[rel]
        blob = self._from_mapping(name, location, rel) if self.files else None
        if blob is None and self.base_dir is not None:
            root = os.path.realpath(self.base_dir)
            path = os.path.realpath(os.path.join(root, *rel.split("/")))
            if os.path.commonpath([root, path]) != root:
                raise ModelFormatError("tensor %r: external data location %r resolves to %s, outside the model's "
                                       "folder %s" % (name, location, path, root))
            if not os.path.isfile(path):
                raise ModelFormatError("tensor %r: external data file %r does not exist (looked for %s next to "
                                       "the model)" % (name, location, path))
            with open(path, "rb") as f:
                blob = f.read()
        if blob is None:
            if self.base_dir is None and not self.files:
                raise ModelFormatError("tensor %r keeps its data in the external file %r, and the model was given "
                                       "as bytes or a ModelProto: pass the file's bytes too (external_data={%r: ...}) "
                                       "or load the model from its path" % (name, location, location))
            raise ModelFormatError("tensor %r: external data file %r was not given (external_data has %s)"
                                   % (name, location, ", ".join(repr(k) for k in sorted(self.files)) or "nothing"))
        self._cache[rel] = blob
        return blob


def load_external_data(model: ModelProto, base_dir: Optional[str] = None,
                       files: Optional[Mapping[str, bytes]] = None) -> ModelProto:
    """Read every external tensor of ``model`` into its ``raw_data`` (in place; returns ``model``).

    base_dir: the model's folder (when it was loaded from a path).
    files: {location: bytes} (when it was loaded from bytes, e.g. files uploaded in a browser);
        a location is also matched by its file name alone.
    """
    source: Optional[_Source] = None
    for t in external_tensors(model):
        if source is None:
            source = _Source(base_dir, files)
        location, offset, length = _entries(t)
        blob = source.data(t.name, location)
        want = _expected_bytes(t)
        if length is not None and length != want:
            raise ModelFormatError("tensor %r: external data length %d does not match its shape %s of %s (%d bytes)"
                                   % (t.name, length, list(t.dims), dtypes.NAMES.get(t.data_type, t.data_type), want))
        if offset + want > len(blob):
            raise ModelFormatError("tensor %r: external data %r holds %d bytes, the tensor needs bytes %d..%d"
                                   % (t.name, location, len(blob), offset, offset + want))
        t.raw_data = blob[offset:offset + want]
        del t.external_data[:]
        t.data_location = 0
    return model
