"""A checkpoint the worker holds outside the wasm heap, handed to Python range by range (pytrain/webapp/gpu_load.py,
the resume of a run whose optimizer state lives on the GPU only after its device was lost): the parameters and
moments it gives are the ones pytrain.checkpoint.decode reads, no range is wider than a member, and a damaged,
truncated, compressed or foreign checkpoint is refused as decode refuses it (the browser side, with a real lost
device: tests/browser/test_webgpu_big.py)."""
from __future__ import annotations

import ctypes
import io
import zipfile

import numpy as np
import pytest

from pytrain.checkpoint import CheckpointState
from pytrain.device import api
from pytrain.errors import CheckpointError
from pytrain.webapp.demo import digits_artifacts
from pytrain.webapp.gpu_load import LoadStream


@pytest.fixture(scope="module")
def trained():
    arts = digits_artifacts("mlp", "AdamW")
    module = api.Module(arts["training"], CheckpointState.load_checkpoint(arts["checkpoint"]), arts["eval"])
    opt = api.Optimizer(arts["optimizer"], module)
    rng = np.random.RandomState(0)
    for _ in range(3):
        module.lazy_reset_grad()
        module(rng.rand(16, 784).astype(np.float32), rng.randint(0, 10, 16).astype(np.int64))
        opt.step()
    return arts, module.state.to_bytes()


def _load(blob: bytes, params):
    """The worker's side: each range asked for copied into the heap where Python asks (as training.js gpuRenew)."""
    moments, seen = {}, {}
    def install(manifest):
        seen["manifest"] = manifest
        return lambda p, slot, a: moments.setdefault(p, {}).__setitem__(slot, a.copy())
    stream = LoadStream(len(blob), params, install)
    r, widths = stream.ask(), []
    while not r.get("done"):
        a, b = r["want"]
        widths.append(b - a)
        ctypes.memmove(r["into"], blob[a:b], b - a)
        r = stream.next()
    return moments, seen["manifest"], widths


def test_the_ranges_give_the_checkpoint_decode_reads_a_member_at_a_time(trained):
    arts, blob = trained
    want = CheckpointState.load_checkpoint(blob)
    params = CheckpointState.load_checkpoint(arts["checkpoint"]).parameters   # (the heap's, at other values)
    moments, manifest, widths = _load(blob, params)
    for n, p in want.parameters.items():
        assert np.array_equal(params[n].data, p.data), n
    assert {p: sorted(d) for p, d in moments.items()} == {p: sorted(d) for p, d in want.optimizer_state.slots.items()}
    for p, d in want.optimizer_state.slots.items():
        for slot, a in d.items():
            assert np.array_equal(moments[p][slot], a), (p, slot)
    assert manifest["optimizer"]["step"] == 3 and manifest["properties"] == dict(want.properties)
    largest = max(p.data.nbytes for p in want.parameters.values())
    assert max(widths) <= largest + 1024 < len(blob), (max(widths), largest)


def test_a_damaged_truncated_compressed_or_foreign_checkpoint_is_refused(trained):
    arts, blob = trained
    params = CheckpointState.load_checkpoint(arts["checkpoint"]).parameters
    flipped = bytearray(blob)
    flipped[blob.index(b"NUMPY", 2000) + 200] ^= 1
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        _load(bytes(flipped), params)
    with pytest.raises(CheckpointError, match="no zip end record"):
        _load(blob[:-10], params)
    packed = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(blob)) as src, zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    with pytest.raises(CheckpointError, match="compressed"):
        _load(packed.getvalue(), params)
    fewer = dict(params)
    fewer.pop(next(iter(fewer)))
    with pytest.raises(CheckpointError, match="not one of this model's"):
        _load(blob, fewer)
