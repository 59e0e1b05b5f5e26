"""The checkpoint: parameters (trainable and frozen), optimizer state and user properties.

On disk it is a plain zip archive, inspectable with ordinary tools: ``manifest.json`` says what
is inside (names, shapes, dtypes, SHA-256 of every array) and each array is a ``.npy`` file
(``numpy.load`` reads it). Reading verifies every checksum, so a corrupted or truncated file is
refused instead of yielding garbage weights; writing is atomic (write, then rename).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections import OrderedDict
from typing import Any, Dict, Iterator, Mapping, MutableMapping, Optional, Union

import numpy as np

from pytrain.errors import CheckpointError
from pytrain.proto import write_atomic

FORMAT = "pytrain.checkpoint"
VERSION = 1
_MANIFEST = "manifest.json"
_MANIFEST_SUM = "manifest.sha256"

Property = Union[int, float, str]


class Parameter:
    """A parameter as ORT exposes it: ``data``, ``grad`` (None until a train step) and ``requires_grad``."""

    __slots__ = ("name", "data", "grad", "requires_grad", "shape", "dtype")

    def __init__(self, name: str, data: Optional[np.ndarray], requires_grad: bool,
                 shape: Optional[tuple] = None, dtype: Any = np.float32) -> None:
        self.name = name
        self.data = data
        self.grad: Optional[np.ndarray] = None
        self.requires_grad = requires_grad
        self.shape = tuple(data.shape) if data is not None else tuple(shape or ())
        self.dtype = np.dtype(data.dtype if data is not None else dtype)

    def __repr__(self) -> str:
        return "Parameter(%r, shape=%s, dtype=%s, requires_grad=%s%s)" % (
            self.name, list(self.shape), self.dtype, self.requires_grad,
            ", nominal" if self.data is None else "")


class Properties(MutableMapping):
    """User properties: int, float or str values only (what the format can hold exactly)."""

    def __init__(self, items: Optional[Mapping[str, Property]] = None) -> None:
        self._d: Dict[str, Property] = {}
        for k, v in (items or {}).items():
            self[k] = v

    def __setitem__(self, key: str, value: Property) -> None:
        if not isinstance(key, str):
            raise CheckpointError("property names must be strings, got %r" % (key,))
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CheckpointError("property %r must be an int, float or str, got %s"
                                  % (key, type(value).__name__))
        self._d[key] = value

    def __getitem__(self, key: str) -> Property:
        return self._d[key]

    def __delitem__(self, key: str) -> None:
        del self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return "Properties(%r)" % self._d


class OptimizerState:
    """Step count, learning rate and per-parameter state arrays (e.g. exp_avg, exp_avg_sq)."""

    def __init__(self, step: int = 0, learning_rate: Optional[float] = None,
                 slots: Optional[Dict[str, Dict[str, np.ndarray]]] = None) -> None:
        self.step = step
        self.learning_rate = learning_rate
        self.slots: Dict[str, Dict[str, np.ndarray]] = slots or {}


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)  # ascontiguousarray would make 0-d arrays 1-d
    return buf.getvalue()


def encode(parameters: Mapping[str, Parameter], properties: Mapping[str, Property],
           optimizer: Optional[OptimizerState]) -> bytes:
    """Serialize to the zip format described in the module docstring."""
    out = io.BytesIO()
    manifest: Dict[str, Any] = {"format": FORMAT, "version": VERSION, "parameters": [],
                                "properties": dict(properties), "optimizer": None}
    def member(path: str) -> zipfile.ZipInfo:
        # a fixed date: the same state always gives the same bytes (caches, diffs, hashes)
        return zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))

    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        def put(path: str, array: np.ndarray) -> str:
            data = _npy(array)
            z.writestr(member(path), data)
            return hashlib.sha256(data).hexdigest()

        for i, p in enumerate(parameters.values()):
            entry = {"name": p.name, "shape": list(p.shape), "dtype": p.dtype.str,
                     "requires_grad": bool(p.requires_grad), "file": None, "sha256": None}
            if p.data is not None:
                entry["file"] = "parameters/%04d.npy" % i
                entry["sha256"] = put(entry["file"], p.data)
            manifest["parameters"].append(entry)
        if optimizer is not None:
            slots = []
            for i, (pname, states) in enumerate(sorted(optimizer.slots.items())):
                for slot, arr in sorted(states.items()):
                    path = "optimizer/%04d.%s.npy" % (i, slot)
                    slots.append({"param": pname, "slot": slot, "file": path, "sha256": put(path, arr)})
            manifest["optimizer"] = {"step": int(optimizer.step), "learning_rate": optimizer.learning_rate,
                                     "state": slots}
        body = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
        z.writestr(member(_MANIFEST), body)
        z.writestr(member(_MANIFEST_SUM), hashlib.sha256(body).hexdigest())
    return out.getvalue()


def decode(data: bytes, label: str) -> "tuple[OrderedDict[str, Parameter], Properties, Optional[OptimizerState]]":
    """Parse and verify a checkpoint; CheckpointError names ``label`` and what is wrong."""
    def bad(why: str) -> CheckpointError:
        return CheckpointError("checkpoint %s is corrupted or not a pytrain checkpoint: %s" % (label, why))

    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        body = z.read(_MANIFEST)
        expected = z.read(_MANIFEST_SUM).decode("ascii").strip()
    except (zipfile.BadZipFile, KeyError, EOFError, ValueError, OSError) as e:
        raise bad("%s (%d bytes; truncated or not a zip archive?)" % (e, len(data))) from None
    if hashlib.sha256(body).hexdigest() != expected:
        raise bad("manifest checksum mismatch")
    try:
        manifest = json.loads(body.decode("utf-8"))
    except ValueError as e:
        raise bad("manifest is not JSON (%s)" % e) from None
    if manifest.get("format") != FORMAT:
        raise bad("format is %r, expected %r" % (manifest.get("format"), FORMAT))
    if manifest.get("version") != VERSION:
        raise CheckpointError("checkpoint %s has format version %r; this pytrain reads version %d"
                              % (label, manifest.get("version"), VERSION))

    def get(path: str, sha: str, what: str) -> np.ndarray:
        try:
            raw = z.read(path)
        except (KeyError, zipfile.BadZipFile, EOFError, OSError) as e:
            raise bad("%s: %s" % (what, e)) from None
        if hashlib.sha256(raw).hexdigest() != sha:
            raise bad("%s: checksum mismatch" % what)
        return np.load(io.BytesIO(raw), allow_pickle=False)

    params: "OrderedDict[str, Parameter]" = OrderedDict()
    for e in manifest["parameters"]:
        arr = get(e["file"], e["sha256"], "parameter %r" % e["name"]) if e["file"] else None
        params[e["name"]] = Parameter(e["name"], arr, bool(e["requires_grad"]), tuple(e["shape"]),
                                      np.dtype(e["dtype"]))
    opt = None
    if manifest.get("optimizer"):
        o = manifest["optimizer"]
        slots: Dict[str, Dict[str, np.ndarray]] = {}
        for s in o["state"]:
            slots.setdefault(s["param"], {})[s["slot"]] = get(
                s["file"], s["sha256"], "optimizer state %s of %r" % (s["slot"], s["param"]))
        opt = OptimizerState(int(o["step"]), o.get("learning_rate"), slots)
    return params, Properties(manifest.get("properties") or {}), opt


class CheckpointState:
    """Parameters, optimizer state and properties of a training run (ORT's CheckpointState)."""

    def __init__(self, parameters: "OrderedDict[str, Parameter]", properties: Optional[Properties] = None,
                 optimizer_state: Optional[OptimizerState] = None) -> None:
        self.parameters = parameters
        self.properties = properties if properties is not None else Properties()
        self.optimizer_state = optimizer_state

    @classmethod
    def load_checkpoint(cls, checkpoint: Union[str, "os.PathLike[str]", bytes, bytearray]) -> "CheckpointState":
        """Load from a path or from bytes; CheckpointError when missing, corrupted or truncated."""
        if isinstance(checkpoint, (bytes, bytearray, memoryview)):
            return cls(*decode(bytes(checkpoint), "(bytes)"))
        path = os.fspath(checkpoint)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CheckpointError("checkpoint file %s does not exist" % path) from None
        except IsADirectoryError:
            raise CheckpointError("checkpoint path %s is a directory, expected a file" % path) from None
        return cls(*decode(data, path))

    def to_bytes(self, include_optimizer_state: bool = True) -> bytes:
        """The checkpoint file's content, without touching a file system."""
        return encode(self.parameters, self.properties,
                      self.optimizer_state if include_optimizer_state else None)

    @staticmethod
    def save_checkpoint(state: "CheckpointState", checkpoint_uri: Union[str, "os.PathLike[str]"],
                        include_optimizer_state: bool = False) -> None:
        """Write atomically: a crash mid-save leaves the previous checkpoint intact."""
        write_atomic(checkpoint_uri, state.to_bytes(include_optimizer_state))

    @property
    def nominal(self) -> bool:
        """True when parameters carry shapes only (fill them with Module.copy_buffer_to_parameters)."""
        return any(p.data is None for p in self.parameters.values())

    def __repr__(self) -> str:
        return "CheckpointState(%d parameters, %d properties%s)" % (
            len(self.parameters), len(self.properties),
            ", optimizer step %d" % self.optimizer_state.step if self.optimizer_state else "")
