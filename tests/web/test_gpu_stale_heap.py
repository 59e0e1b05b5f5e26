"""While the WebGPU device holds parameters newer than the wasm heap's (pytrain/webapp/gpu_slices.py: ``stale``), the
worker's bridge (pytrain/webapp/bridge.py) refuses every session method that reads them, naming the read back it
needs, and runs the ones that read none (the browser side: tests/browser/test_webgpu.py)."""
from __future__ import annotations

import json

import numpy as np

from pytrain import webapp
from pytrain.webapp import bridge


def _call(s: webapp.Session, method: str, **args) -> dict:
    return json.loads(bridge.call(s, method, json.dumps(args))[0])


def test_the_bridge_refuses_reading_parameters_the_gpu_holds():
    s = webapp.Session()
    x = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    s.use_arrays(x, (x[:, 0] > 0).astype(np.int64), classes=["no", "yes"])
    s.build_mlp(hidden=[8])
    s.gpu.stale = True   # (as after a GPU slice: the CheckpointState is older than the GPU's parameters)
    for method in ("checkpoint", "export", "evaluate", "digest", "snapshot"):
        out = _call(s, method)
        assert not out["ok"] and "not read back yet (gpu_sync)" in out["error"]["message"], (method, out)
        assert out["error"]["expected"]
    for method, args in (("status", {}), ("run_options", {}), ("configure", {"lr": 0.01})):
        assert _call(s, method, **args)["ok"], method
    s.gpu.stale = False
    assert _call(s, "checkpoint")["ok"] and _call(s, "digest")["ok"]


def test_a_rewind_restores_the_position_the_optimizer_step_and_the_properties():
    # what a lost device goes back to (gpu_slices.Mark): the dropout generator's step is a checkpoint property
    from types import SimpleNamespace

    from pytrain.webapp.gpu_slices import Mark

    s = webapp.Session()
    x = np.random.default_rng(1).standard_normal((40, 6)).astype(np.float32)
    s.use_arrays(x, (x[:, 0] > 0).astype(np.int64), classes=["no", "yes"])
    s.build_mlp(hidden=[8])
    module = s.run.module
    module.state.properties["pytrain.rng_step"] = 3
    at = SimpleNamespace(epoch=1, epoch_step=2, step=7)
    mark = Mark.now(module, at)
    module.state.properties["pytrain.rng_step"] = 9
    module.state.properties["added.later"] = "x"
    module.state.optimizer_state.step += 5
    at.epoch, at.epoch_step, at.step = 2, 0, 12
    mark.restore(at, module)
    assert (at.epoch, at.epoch_step, at.step) == (1, 2, 7)
    assert module.state.optimizer_state.step == mark.optimizer_step
    assert module.state.properties["pytrain.rng_step"] == 3 and "added.later" not in module.state.properties


class _HostTensor:
    """A GPU tensor's stand-in: its read back lands at once (as after the JS settle)."""

    def __init__(self, a):
        self.a, self.shape = a, a.shape
        self.reads = 0

    def read_into(self, out):
        self.reads += 1
        np.copyto(out, self.a)


def test_a_streamed_save_is_the_checkpoint_holding_one_moment_at_a_time():
    # pytrain/webapp/gpu_save.py: the moments read back one by one, written and let go; the bytes are to_bytes'
    from types import SimpleNamespace

    from pytrain.device.webgpu import MomentsOnGpu
    from pytrain.errors import LimitError
    from pytrain.webapp.gpu_save import SaveStream

    s = webapp.Session()
    x = np.random.default_rng(2).standard_normal((40, 6)).astype(np.float32)
    s.use_arrays(x, (x[:, 0] > 0).astype(np.int64), classes=["no", "yes"])
    s.build_mlp(hidden=[8])
    s.train_for(max_steps=3)
    state = s.run.module.state
    want = state.to_bytes()
    slots = ["exp_avg", "exp_avg_sq"]
    moments = {p: [_HostTensor(state.optimizer_state.slots[p][k].copy()) for k in slots]
               for p in state.optimizer_state.slots}
    state.optimizer_state.slots = MomentsOnGpu(1 << 20)   # (the heap holds none: reading them is refused)
    try:
        state.to_bytes()
        raise AssertionError("a checkpoint without the moments was written")
    except LimitError as e:
        assert "lives on the GPU only" in str(e)
    stream = SaveStream(SimpleNamespace(module=s.run.module, slot_names=slots, moments=moments))
    parts, calls, pending = [], 0, 0
    while True:
        r = stream.next()
        calls += 1
        pending += r["pending"]
        assert not (r["pending"] and r["chunks"])   # (a read enqueued, or pieces written: never both at once)
        parts += [bytes(c) for c in r["chunks"]]
        if r["done"]:
            break
    assert b"".join(parts) == want
    assert pending == 2 * len(moments) and all(t.reads == 1 for per in moments.values() for t in per)
    assert stream.held == max(t.a.nbytes for per in moments.values() for t in per)
