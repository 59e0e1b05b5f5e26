"""Mutation fuzzing of everything pytrain reads from outside: model files and checkpoints.

``Fuzzer`` runs each mutant in a worker process under a memory cap (RLIMIT_AS) and a time limit,
through the whole user path (load, generate_artifacts, one train step, export; or load a checkpoint
and train on it), and sorts the outcomes:

* ``accepted``: every stage ran; the exported model comes back for an ``onnx.checker`` check,
* ``refused``: a ``pytrain.errors.PytrainError`` (the message is kept),
* ``escaped``: any other exception, a crash, a hang or a memory blow-up: each one a defect.

The mutators are seeded, so a failing mutant is reproduced from its seed alone.
"""
from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import random
import struct
import traceback
import zipfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from waits import wait_s

MEMORY_CAP = 3 << 30          # bytes of address space per worker
TIME_LIMIT = wait_s(20.0)     # seconds per mutant (a hang, not a budget: scaled for a loaded machine)
RESULT_KINDS = ("accepted", "refused", "escaped")


# ---- what one mutant goes through (in the worker) -----------------------------------------------
def _inputs_for(module: Any) -> List[Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = []
    for spec in module._inputs:
        shape = [d if isinstance(d, int) else 2 for d in (spec.shape or [2])]
        dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(np.zeros(shape, dtype))
        else:
            arrays.append(np.zeros(shape, dtype))
    return arrays


def run_model(data: bytes) -> Optional[bytes]:
    """Load, generate, one train step, export: the exported model's bytes."""
    from pytrain.generator import artifacts
    from pytrain.device.api import CheckpointState, Module, Optimizer
    from pytrain.engine.validate import load_model

    model = load_model(data)
    outputs = [o.name for o in model.graph.output]
    arts = artifacts.generate_artifacts(data, loss=artifacts.LossType.MSELoss, optimizer="AdamW")
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    optimizer = Optimizer(arts.optimizer_model, module)
    module(*_inputs_for(module))
    optimizer.step()
    return module.export_model_for_inferencing(None, outputs[:1])


def run_checkpoint(data: bytes, artifacts_blob: bytes) -> Optional[bytes]:
    """Load a (mutated) checkpoint and train one step on it with the matching artifacts."""
    from pytrain.device.api import CheckpointState, Module, Optimizer

    arts = json.loads(artifacts_blob.decode())
    state = CheckpointState.load_checkpoint(data)
    module = Module(bytes.fromhex(arts["training"]), state, bytes.fromhex(arts["eval"]))
    optimizer = Optimizer(bytes.fromhex(arts["optimizer"]), module)
    module(*_inputs_for(module))
    optimizer.step()
    CheckpointState.save_checkpoint  # (saving is covered by the kill -9 test)
    return None


_TARGETS: Dict[str, Callable[..., Optional[bytes]]] = {"model": run_model, "checkpoint": run_checkpoint}


def _worker(conn: Any) -> None:
    import resource

    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    from pytrain.errors import PytrainError

    while True:
        job = conn.recv()
        if job is None:
            return
        target, args = job
        try:
            exported = _TARGETS[target](*args)
            conn.send(("accepted", exported))
        except PytrainError as e:
            conn.send(("refused", "%s: %s" % (type(e).__name__, str(e)[:300])))
        except BaseException as e:  # noqa: BLE001 - every other exception is the finding
            conn.send(("escaped", "%s: %s\n%s" % (type(e).__name__, str(e)[:300],
                                                  "".join(traceback.format_exc(limit=6)))))


class Fuzzer:
    """A worker process that runs mutants one by one; a dead or hung worker is replaced."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker, args=(child,), daemon=True)
        self._proc.start()
        self._conn = parent

    def run(self, target: str, *args: Any) -> Tuple[str, Any]:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((target, args))
        if not self._conn.poll(TIME_LIMIT):
            self._proc.kill()
            self._proc.join()
            self._proc = None
            return "escaped", "hang: no answer within %.0f s" % TIME_LIMIT
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            code = self._proc.exitcode if self._proc is not None else None
            self._proc = None
            return "escaped", "worker died (exit code %s)" % code

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
        self._proc = None


def trained_mlp() -> Tuple[Any, bytes]:
    """An MLP's artifacts (MSE, AdamW) and its checkpoint with optimizer state after one step: the
    seed of the checkpoint mutants, and what the hostile-input tests damage."""
    import numpy as np

    from pytrain.generator import artifacts, models
    from pytrain.device.api import CheckpointState, Module, Optimizer

    arts = artifacts.generate_artifacts(models.mlp(6, [5], 3), loss=artifacts.LossType.MSELoss, optimizer="AdamW")
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    module(np.ones((2, 6), np.float32), np.ones((2, 3), np.float32))
    opt.step()
    return arts, state.to_bytes(include_optimizer_state=True)


# ---- byte-level mutators -----------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(1, len(data))]


def huge_length(data: bytes, rng: random.Random) -> bytes:
    """Overwrite a byte with a 10-byte varint of a huge or negative length."""
    pos = rng.randrange(len(data))
    value = rng.choice([1 << 62, (1 << 64) - 1, 1 << 40, 2 ** 31 - 1, -5])
    return data[:pos] + _varint(value) + data[pos + 1:]


def swap_wire_type(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    pos = rng.randrange(len(b))
    b[pos] = (b[pos] & ~7) | rng.choice([0, 1, 2, 5])
    return bytes(b)


def splice(data: bytes, rng: random.Random) -> bytes:
    i, j = sorted(rng.randrange(len(data)) for _ in range(2))
    k = rng.randrange(len(data))
    return data[:k] + data[i:j] + data[k:]


BYTE_MUTATORS = [flip_bits, truncate, huge_length, swap_wire_type, splice]


# ---- structure-level mutators (with the onnx package, in the parent) ----------------------------
def structural(data: bytes, rng: random.Random) -> bytes:
    import onnx
    from onnx import AttributeProto

    m = onnx.ModelProto()
    m.ParseFromString(data)
    g = m.graph
    kind = rng.randrange(10)
    nodes = list(g.node)
    if kind == 0 and nodes:      # attribute type swapped
        n = rng.choice(nodes)
        if n.attribute:
            a = rng.choice(list(n.attribute))
            a.type = rng.choice([AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT,
                                 AttributeProto.STRING, AttributeProto.TENSOR, AttributeProto.GRAPH])
    elif kind == 1 and g.initializer:  # dims made huge or negative
        t = rng.choice(list(g.initializer))
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice([10 ** 12, -3, 0, 2 ** 40])
    elif kind == 2 and nodes:    # an input renamed to something undefined
        n = rng.choice(nodes)
        if n.input:
            n.input[rng.randrange(len(n.input))] = "undefined_%d" % rng.randrange(100)
    elif kind == 3 and len(nodes) > 1:  # a cycle: an early node reads a late node's output
        a, b = nodes[0], nodes[-1]
        if a.input and b.output:
            a.input[0] = b.output[0]
    elif kind == 4 and len(g.initializer) > 1:  # duplicate tensor names
        g.initializer[1].name = g.initializer[0].name
    elif kind == 5 and nodes:    # wrong arity
        n = rng.choice(nodes)
        if rng.random() < 0.5 and n.input:
            del n.input[-1]
        else:
            n.input.append(n.input[0] if n.input else "x")
    elif kind == 6:              # bad opset or IR version
        if rng.random() < 0.5:
            m.ir_version = rng.choice([0, 1, 99, -1 & 0x7FFFFFFF])
        elif m.opset_import:
            m.opset_import[0].version = rng.choice([0, 3, 999])
    elif kind == 7 and g.input:  # element type conflict
        g.input[0].type.tensor_type.elem_type = rng.choice([7, 8, 9, 99, 17, 22])
    elif kind == 8 and g.initializer:  # two data fields
        t = rng.choice(list(g.initializer))
        t.float_data.extend([1.0, 2.0])
    elif kind == 9:              # deep nesting: a node with a graph attribute nested 2,000 deep
        inner = onnx.GraphProto()
        for _ in range(60):
            outer = onnx.GraphProto()
            node = outer.node.add()
            node.op_type = "If"
            attr = node.attribute.add()
            attr.name, attr.type = "then_branch", AttributeProto.GRAPH
            attr.g.CopyFrom(inner)
            inner = outer
        extra = g.node.add()
        extra.op_type, extra.output[:] = "Identity", ["nested_out"]
        extra.input.append(g.input[0].name if g.input else "x")
        attr = extra.attribute.add()
        attr.name, attr.type = "g", AttributeProto.GRAPH
        attr.g.CopyFrom(inner)
    return m.SerializeToString()


def deep_nesting_bytes(depth: int = 2000) -> bytes:
    """A ModelProto whose graph holds a node attribute graph ... nested ``depth`` deep, written by
    hand (protobuf's own encoder refuses past 100)."""
    # GraphProto{ node(1): NodeProto{ attribute(5): AttributeProto{ g(6): GraphProto{ ... } } } }
    inner = b""
    for _ in range(depth):
        attr = b"\x0a\x01g" + b"\x32" + _varint(len(inner)) + inner + b"\xa0\x01\x05"  # name, g, type=GRAPH
        node = b"\x2a" + _varint(len(attr)) + attr
        inner = b"\x0a" + _varint(len(node)) + node
    opset = b"\x08\x11"
    return b"\x08\x08" + b"\x3a" + _varint(len(inner)) + inner + b"\x42" + _varint(len(opset)) + opset


# ---- checkpoint mutators ------------------------------------------------------------------------
def _zip(members: List[Tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, body in members:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), body, compress_type=method)
    return out.getvalue()


def _members(data: bytes) -> List[Tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def _with_manifest(members: List[Tuple[str, bytes]], edit: Callable[[Dict[str, Any]], None]) -> bytes:
    import hashlib

    d = dict(members)
    manifest = json.loads(d["manifest.json"])
    edit(manifest)
    body = json.dumps(manifest).encode()
    d["manifest.json"] = body
    d["manifest.sha256"] = hashlib.sha256(body).hexdigest().encode()
    return _zip(list(d.items()))


_BOMBS: Dict[Tuple[bytes, str], bytes] = {}


def zip_bomb(data: bytes, member: str, size: int = 80 << 20, declared: Optional[int] = None) -> bytes:
    """``data`` with ``member`` replaced by ``size`` zero bytes, deflated (a few hundred KB on disk),
    its size in the archive's headers ``declared`` (default: the true size; smaller: a lying bomb)."""
    key = (data, member + ":%d:%s" % (size, declared))
    if key not in _BOMBS:
        import zlib

        members = _members(data)
        comp = zlib.compressobj(9, zlib.DEFLATED, -15)
        chunk = b"\0" * (1 << 20)
        packed = b"".join(comp.compress(chunk) for _ in range(size >> 20)) + comp.flush()
        crc = 0
        for _ in range(size >> 20):
            crc = zlib.crc32(chunk, crc)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
            for name, body in members:
                if name != member:
                    z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), body)
        # append the bomb member by hand: zipfile would inflate nothing, but it would compress the
        # whole gigabyte itself; the local header and central directory are written here instead
        blob = out.getvalue()
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            infos = z.infolist()
        first_cd = blob.find(b"PK\x01\x02")
        local = blob[:first_cd]
        central = blob[first_cd:blob.rfind(b"PK\x05\x06")]
        name_b = member.encode()
        offset = len(local)
        stated = size if declared is None else declared
        local += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(packed), stated,
                             len(name_b), 0) + name_b + packed
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(packed),
                               stated, len(name_b), 0, 0, 0, 0, 0, offset) + name_b
        count = len(infos) + 1
        end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), len(local), 0)
        _BOMBS[key] = local + central + end
    return _BOMBS[key]


def _set_sha(manifest: Dict[str, Any], member: str, body: bytes) -> None:
    """Make the manifest vouch for ``body`` as ``member`` (so the mutant passes the checksums)."""
    import hashlib

    entries = manifest["parameters"] + ((manifest.get("optimizer") or {}).get("state") or [])
    for e in entries:
        if e.get("file") == member:
            e["sha256"] = hashlib.sha256(body).hexdigest()


def checkpoint_mutant(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(9)
    members = _members(data)
    if kind == 0:
        return flip_bits(data, rng)
    if kind == 1:
        return truncate(data, rng)
    if kind == 2:  # zip bombs: a manifest or a parameter that inflates far past any limit
        return zip_bomb(data, "manifest.json" if rng.random() < 0.5 else
                        rng.choice([n for n, _ in members if n.endswith(".npy")]),
                        declared=rng.choice([None, 100]))
    if kind == 3:  # a pickled object array in place of a parameter
        buf = io.BytesIO()
        import numpy as np
        np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        body = buf.getvalue()
        name = rng.choice([n for n, _ in members if n.endswith(".npy")])

        def edit(m: Dict[str, Any]) -> None:
            _set_sha(m, name, body)
        return _with_manifest([(n, body if n == name else b) for n, b in members], edit)
    if kind == 4:  # a .npy header declaring 1e10 elements
        name = rng.choice([n for n, _ in members if n.endswith(".npy")])
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000,), }"
        header += " " * (63 - len(header) % 64) + "\n"
        body = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 64

        def edit(m: Dict[str, Any]) -> None:
            _set_sha(m, name, body)
        return _with_manifest([(n, body if n == name else b) for n, b in members], edit)
    if kind == 5:  # manifest shape disagrees with the array
        def edit(m: Dict[str, Any]) -> None:
            e = rng.choice(m["parameters"])
            e["shape"] = [d + 1 for d in e["shape"]] or [3]
        return _with_manifest(members, edit)
    if kind == 6:  # a parameter listed twice
        def edit(m: Dict[str, Any]) -> None:
            m["parameters"].append(dict(m["parameters"][0]))
        return _with_manifest(members, edit)
    if kind == 7:  # fields of the wrong type or missing
        def edit(m: Dict[str, Any]) -> None:
            e = rng.choice(m["parameters"])
            key = rng.choice(["shape", "dtype", "name", "requires_grad", "file"])
            if rng.random() < 0.5:
                del e[key]
            else:
                e[key] = rng.choice([None, 3, "x", [1, "a"], {"k": 1}, -1.5])
        return _with_manifest(members, edit)
    # kind 8: a member name duplicated
    return _zip(members + [members[0]])
