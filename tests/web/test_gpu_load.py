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
    def install(props, step):
        seen["installed"] = (props, step)
        return lambda p, slot, a: moments.setdefault(p, {}).__setitem__(slot, a.copy())
    stream = LoadStream(len(blob), params, install)
    r, widths = stream.ask(), []
    while not r.get("done"):
        a, b = r["want"]
        widths.append(b - a)
        ctypes.memmove(r["into"], blob[a:b], b - a)
        r = stream.next()
    return moments, seen["installed"], widths


def test_the_ranges_give_the_checkpoint_decode_reads_a_member_at_a_time(trained):
    arts, blob = trained
    want = CheckpointState.load_checkpoint(blob)
    params = CheckpointState.load_checkpoint(arts["checkpoint"]).parameters   # (the heap's, at other values)
    moments, (props, step), widths = _load(blob, params)
    for n, p in want.parameters.items():
        assert np.array_equal(params[n].data, p.data), n
    assert {p: sorted(d) for p, d in moments.items()} == {p: sorted(d) for p, d in want.optimizer_state.slots.items()}
    for p, d in want.optimizer_state.slots.items():
        for slot, a in d.items():
            assert np.array_equal(moments[p][slot], a), (p, slot)
    assert step == 3 and dict(props) == dict(want.properties)
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


def test_going_back_to_a_good_checkpoint_the_worker_holds_is_refused_by_name_without_a_gpu(trained):
    # (natively no WebGPU device is registered: the optimizer state the good checkpoint holds has nowhere to go)
    from pytrain.webapp.common import WebappError
    from pytrain.webapp.run_state import Good
    from pytrain.webapp.session import Session
    arts, blob = trained
    session = Session()
    session.use_model(dict(arts), {"name": "digits MLP"})
    before = session.digest()
    session.run.keep_good(Good(None, 1, 0, 8))   # (streamed at an epoch's end: the worker holds its bytes)
    with pytest.raises(WebappError, match="only the GPU can take back, and there is no WebGPU device"):
        session.restore_good(size=len(blob))
    assert session.digest() == before and session.run.at.step == 0   # (nothing changed)


def test_a_saved_run_reopened_range_by_range_is_the_run_reopened_whole():
    # the worker's resumeSaved with a device holds the checkpoint and hands it over as Python asks (gpu_resume);
    # natively no device: the moments come into the heap, and the run is the one the whole read gives, bit for bit
    from pytrain.webapp.session import Session
    rng = np.random.RandomState(1)
    s = Session()
    s.use_arrays(rng.rand(48, 784).astype(np.float32), np.arange(48) % 10, classes=[str(k) for k in range(10)])
    s.build_digits("mlp", "AdamW")
    s.configure(batch_size=8, lr=0.01)
    s.train_for(budget_ms=1e9, max_steps=3)
    snap = s.snapshot()
    whole, ranged = Session(), Session()
    whole.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    blob = snap["checkpoint"]
    r, calls = ranged.restore(snap["meta"], snap["artifacts"], b"", snap["data"], checkpoint_size=len(blob)), 1
    while not r.get("done"):
        a, b = r["want"]
        ctypes.memmove(r["into"], blob[a:b], b - a)
        r, calls = ranged.gpu_resume(), calls + 1
    assert not r["good_streamed"] and r["digest"] == whole.digest() == s.digest() and calls > 8
    assert (r["epoch"], r["step"], r["epoch_step"]) == (whole.run.at.epoch, whole.run.at.step, whole.run.at.epoch_step)
    assert ranged.checkpoint() == whole.checkpoint()   # (parameters, moments, step, properties)
    assert ranged.run.good().checkpoint == whole.run.good().checkpoint
    for _ in range(2):
        got, want = (x.train_for(budget_ms=1e9, max_steps=2)["losses"] for x in (ranged, whole))
        assert got == want
