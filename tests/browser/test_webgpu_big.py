"""A model whose parameters and optimizer state do not fit the wasm heap's budget trains on the WebGPU device (headless
Chromium's SwiftShader adapter, bench/pages/webgpu_check.html as in test_webgpu.py): the optimizer state lives on the
GPU only (pytrain/webapp/gpu_slices.py ``check_heap``, GpuTraining ``keep_moments``), a save streams it moment by
moment (pytrain/webapp/gpu_save.py) with the heap holding one at a time, and a resume uploads the checkpoint's
moments one by one. ``max_heap_bytes`` is set between the parameters + the largest moment and the parameters +
the optimizer state: the CPU refuses the step with the reason, the GPU trains it with the CPU's losses."""
from __future__ import annotations

import json

import pytest
from test_webgpu import MLP_CPU_RUN

BIG = r"""
import hashlib, json, types, tracemalloc
import numpy as np
from pytrain.base import limits as L
from pytrain.device import api
from pytrain.errors import LimitError
from pytrain.ops import wasm
from pytrain.webapp.demo import digits_artifacts
from pytrain.webapp.gpu_slices import GpuSlices, Slice, heap_need

""" + MLP_CPU_RUN + r"""

# the CPU run with pytrain's own (large) heap budget: 8 steps, its checkpoint at step 4
cpu, cpu_opt = fresh()
cpu_losses = train_cpu(cpu, cpu_opt, 4)
cpu_ckpt = cpu.state.to_bytes()
cpu_losses += train_cpu(cpu, cpu_opt, 8)

module, opt = fresh()
est = module.memory_estimate(*data[0], optimizer=opt)
least = heap_need(module, est)[0]
saved_budget = L.max_heap_bytes
budget = (least + est.parameters + est.optimizer_state) // 2
out = {"least": least, "parameters": est.parameters, "state": est.optimizer_state, "budget": budget}
L.set_limits(max_heap_bytes=budget)
try:
    module.check_memory(*data[0], optimizer=opt)
    out["cpu"] = "fits"
except LimitError as e:
    out["cpu"] = str(e)
out["below"] = None
try:
    L.set_limits(max_heap_bytes=least - 1)
    from pytrain.webapp.gpu_slices import check_heap
    check_heap(module, est)
except LimitError as e:
    out["below"] = str(e)
finally:
    L.set_limits(max_heap_bytes=budget)
slices, at = GpuSlices(), types.SimpleNamespace(epoch=0, epoch_step=0, step=0)
work = Slice(list(range(8)), lambda i: data[i], 1e9, 4)
slices.run(module, opt, at, work)   # steps 1-4
"""

SYNC = r"""
out["losses"] = slices.finish()
out["refused"] = slices.refused
out["on_gpu"] = slices.moments_on_gpu
try:
    module.state.optimizer_state.slots.get(module.trainable_names[0])
    out["guard"] = "read"
except LimitError as e:
    out["guard"] = str(e)
try:
    module.state.to_bytes()
    out["whole_save"] = "written"
except LimitError as e:
    out["whole_save"] = str(e)
slices.sync(at)   # the parameters only, as before any save
"""

SAVE = r"""
slices.commit()
out["stale"] = slices.stale
digest, size, parts = hashlib.sha256(), [0], []
tracemalloc.start()
def save_step(start=False):
    r = slices.save(start)
    if r.get("on_heap"):
        return json.dumps({"done": True, "on_heap": True})
    for c in r["chunks"]:   # (the worker copies each piece out of the heap: here a running hash)
        digest.update(c)
        size[0] += len(c)
    parts.append(len(r["chunks"]))
    return json.dumps({"done": r["done"], "pending": r["pending"]})
save_step(True)
"""

AFTER_SAVE = r"""
out["save_peak"] = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
out["save_calls"] = len(parts)
# the same state written whole (its moments read back for the test only, the heap's budget lifted): the same bytes
L.set_limits(max_heap_bytes=saved_budget)
gpu = slices.training
boxes = {p: [np.empty(t.shape, np.float32) for t in per] for p, per in gpu.moments.items()}
for p, per in gpu.moments.items():
    for t, b in zip(per, boxes[p]):
        t.read_into(b)
"""

WHOLE = r"""
from pytrain.checkpoint import OptimizerState, encode
st = module.state
whole = encode(st.parameters, st.properties, OptimizerState(
    st.optimizer_state.step, st.optimizer_state.learning_rate,
    {p: dict(zip(gpu.slot_names, b)) for p, b in boxes.items()}))
del boxes
out["same_bytes"] = hashlib.sha256(whole).hexdigest() == digest.hexdigest() and len(whole) == size[0]
def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1e-6, float(np.max(np.abs(b)))))
got, want = api.CheckpointState.load_checkpoint(whole), api.CheckpointState.load_checkpoint(cpu_ckpt)
out["ckpt"] = {n: rel(got.parameters[n].data, want.parameters[n].data) for n in module.parameter_names}
out["moments"] = {p + "." + s: rel(a, want.optimizer_state.slots[p][s])
                  for p, per in got.optimizer_state.slots.items() for s, a in per.items()}
out["ckpt_step"] = got.optimizer_state.step
del got
L.set_limits(max_heap_bytes=budget)
slices.run(module, opt, at, work)   # steps 5-8, uninterrupted
# resumed from the checkpoint saved at step 4, on the GPU under the same budget
resumed, resumed_opt = fresh(whole)
del whole
resumed_slices, resumed_at = GpuSlices(), types.SimpleNamespace(epoch=0, epoch_step=4, step=4)
resumed_slices.run(resumed, resumed_opt, resumed_at, work)
"""

END = r"""
out["losses"] += slices.finish()
out["resumed"] = resumed_slices.finish()
out["resumed_on_gpu"] = resumed_slices.moments_on_gpu
# a device lost with the optimizer state on it: the CPU cannot go on (the heap never held the state), said by name
L.set_limits(max_heap_bytes=saved_budget)
slices.lost(at, module, "lost in a test")
out["lost"] = slices.refused
try:   # (the epoch ended with the GPU's parameters read back: at step 8, the CPU's next step)
    module.lazy_reset_grad()
    module(*data[0])
    opt.step()
    out["cpu_after_loss"] = "trained"
except LimitError as e:
    out["cpu_after_loss"] = str(e)
out["cpu_losses"] = cpu_losses
json.dumps(out)
"""

SAVE_LOOP = """async () => {
  for (let k = 0; k < 1000; k++) {
    const r = JSON.parse(window.__py("save_step()"));
    if (r.done) return k;
    if (r.pending) await window.__settle();
  }
  throw new Error("the streamed save did not end");
}"""


@pytest.fixture(scope="module")
def big(gpu_page):
    run = lambda code: gpu_page.evaluate("code => window.__py(code)", code)
    for code in (BIG, SYNC):
        run(code)
        gpu_page.evaluate("window.__settle()")
    run(SAVE)
    gpu_page.evaluate("window.__settle()")
    gpu_page.evaluate(SAVE_LOOP)
    run(AFTER_SAVE)
    gpu_page.evaluate("window.__settle()")
    run(WHOLE)
    gpu_page.evaluate("window.__settle()")
    return json.loads(run(END))


def test_the_cpu_refuses_and_the_gpu_trains_with_the_cpu_losses(big):
    assert big["least"] < big["budget"] < big["parameters"] + big["state"]
    assert "over pytrain's memory limit" in big["cpu"], big["cpu"]
    assert big["refused"] is None and big["on_gpu"]
    cpu, gpu = big["cpu_losses"], big["losses"]
    assert len(gpu) == 8
    for c, g in zip(cpu, gpu):
        assert abs(g - c) <= 1e-5 * abs(c), (c, g)


def test_below_the_parameters_and_the_largest_moment_the_gpu_is_refused(big):
    assert "largest optimizer moment" in big["below"] and "%d bytes" % big["least"] in big["below"], big["below"]


def test_the_heap_never_holds_the_optimizer_state(big):
    # the CheckpointState's slots refuse a CPU read by name: no save finds them missing and writes none
    for what in ("guard", "whole_save"):
        assert "lives on the GPU only" in big[what], big[what]
    assert not big["stale"]


def test_a_streamed_save_is_the_checkpoint_holding_one_moment_at_a_time(big):
    assert big["same_bytes"]   # the very bytes of the same state written whole
    assert big["ckpt_step"] == 4
    for name, err in list(big["ckpt"].items()) + list(big["moments"].items()):
        assert err <= 1e-4, (name, err)
    assert len(big["moments"]) == 2 * len(big["ckpt"])
    # the heap's peak during the save (tracemalloc: Python's and numpy's allocations): one moment, not the state
    largest = big["least"] - big["parameters"]
    assert big["save_peak"] <= largest + 64 * 1024, (big["save_peak"], largest)
    assert big["parameters"] + big["save_peak"] <= big["budget"]
    print("streamed save: %d calls, heap peak %d B (largest moment %d B, optimizer state %d B, budget %d B)"
          % (big["save_calls"], big["save_peak"], largest, big["state"], big["budget"]))


def test_a_run_resumed_from_the_streamed_save_goes_on_with_the_same_losses(big):
    assert big["resumed_on_gpu"] and len(big["resumed"]) == 4
    for u, r in zip(big["losses"][4:], big["resumed"]):
        assert abs(r - u) <= 1e-5 * abs(u), (u, r)


def test_a_device_lost_with_the_state_on_it_is_refused_on_the_cpu_by_name(big):
    assert "with the optimizer state on it" in big["lost"] and "resume the run from its last save" in big["lost"]
    assert "lives on the GPU only" in big["cpu_after_loss"], big["cpu_after_loss"]
