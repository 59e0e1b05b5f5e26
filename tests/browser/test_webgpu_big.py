"""A model whose parameters and optimizer state do not fit the wasm heap's budget trains on the WebGPU device (headless
Chromium's SwiftShader adapter, bench/pages/webgpu_check.html as in test_webgpu.py): the optimizer state lives on the
GPU only (pytrain/webapp/gpu_slices.py ``check_heap``, GpuTraining ``keep_moments``), a save streams it moment by
moment (pytrain/webapp/gpu_save.py) with the heap holding one at a time, and a resume uploads the checkpoint's
moments one by one. ``max_heap_bytes`` is set between the parameters + the largest moment and the parameters +
the optimizer state: the CPU refuses the step with the reason, the GPU trains it with the CPU's losses."""
from __future__ import annotations

import json

import pytest
from test_webgpu import MLP_CPU_RUN, NOISE


BIG = r"""
import base64, hashlib, json, types, tracemalloc
import numpy as np
from pytrain.base import limits as L
from pytrain.device import api
from pytrain.errors import LimitError
from pytrain.ops import wasm
from pytrain.webapp.demo import digits_artifacts
from pytrain.webapp.gpu_slices import GpuSlices, Slice, heap_need

SEED = 3   # (its step 1 has a gradient element at float32's accumulation noise: fc1.weight's, see NOISE)
""" + MLP_CPU_RUN + NOISE + r"""

# the CPU run with pytrain's own (large) heap budget: 8 steps, its checkpoint at step 4, the gradients' noise
cpu, cpu_opt = fresh()
cpu_losses, noise = [], {}
for k, (x, y) in enumerate(data):   # (the noise of the gradients at the parameters before each step)
    mark_noise(noise, {n: cpu.state.parameters[n].data for n in cpu.parameter_names}, cpu.trainable_names, x, y)
    cpu_losses += train_cpu(cpu, cpu_opt, k + 1)
    if k == 3:
        cpu_ckpt, noise4 = cpu.state.to_bytes(), {n: v.copy() for n, v in noise.items()}
cpu_ckpt8 = cpu.state.to_bytes()   # (the epoch's end)
cpu_losses2 = []
for x, y in data[:4]:   # steps 9-12: the second epoch's first 4 batches
    cpu.lazy_reset_grad()
    outs = cpu(x, y)
    cpu_losses2.append(float(np.asarray(outs[0] if isinstance(outs, list) else outs)))
    cpu_opt.step()

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
out["ckpt"], out["moments"], out["ckpt_step"] = compare(whole, cpu_ckpt, noise4)
out["noise"] = at_noise(noise)
L.set_limits(max_heap_bytes=budget)
slices.run(module, opt, at, work)   # steps 5-8, uninterrupted
# resumed from the checkpoint saved at step 4, on the GPU under the same budget
resumed, resumed_opt = fresh(whole)
del whole
resumed_slices, resumed_at = GpuSlices(), types.SimpleNamespace(epoch=0, epoch_step=4, step=4)
resumed_slices.run(resumed, resumed_opt, resumed_at, work)
"""

END_FIRST = r"""
out["losses"] += slices.finish()
out["resumed"] = resumed_slices.finish()
out["resumed_on_gpu"] = resumed_slices.moments_on_gpu
# the epoch ended (steps 5-8) with the state on the GPU: the worker streams its good checkpoint (Session.gpu_finish's
# good_streamed, then gpu_save(good=True)), collected here as the worker does, outside the budget's heap
out["good_due"] = slices.epoch_end and slices.moments_on_gpu
good_parts = []
def good_step(start=False):
    r = slices.save(start)
    good_parts.extend(bytes(c) for c in r["chunks"])
    return json.dumps({"done": r["done"], "pending": r["pending"]})
good_step(True)
"""

GOOD = r"""
L.set_limits(max_heap_bytes=saved_budget)
good_blob = b"".join(good_parts)
del good_parts
out["good"] = compare(good_blob, cpu_ckpt8, noise)
L.set_limits(max_heap_bytes=budget)
slices.run(module, opt, at, work)   # steps 9-12 (the second epoch's first 4), uninterrupted
good_b64 = base64.b64encode(good_blob).decode()   # (for the page's JS to hold, as the worker holds it)
del good_blob
good_b64
"""

# the device lost with the optimizer state on it (destroyed for real, below): a new one resumes from the good checkpoint
LOST = r"""
slices.lost(at, module, "lost in a test")
out["lost"], out["renew"] = slices.refused, slices.renew
try:   # (until a new device resumes, the CPU cannot go on: the heap never held the state, said by name)
    module.lazy_reset_grad()
    module(*data[0])
    opt.step()
    out["cpu_after_loss"] = "trained"
except LimitError as e:
    out["cpu_after_loss"] = str(e)
from pytrain.webapp.run_state import Good, TrainingRun
run = TrainingRun()   # (the session's, as far as a resume reads it: the good checkpoint's position, its bytes not here)
run.module, run.optimizer, run.at, run.lr = module, opt, at, 0.01
run.keep_good(Good(None, 1, 0, 8))
def ranged_steps(peak, start, more):
    # the page's side of a ranged read, as the worker drives it: step(size) starts it, step() goes on after each range
    # is copied in; its heap's peak and what stays (the new training) into ``peak``
    def step(size=0):
        if size:
            tracemalloc.start()
        r = start(size) if size else more()
        if r.get("done"):
            peak[:] = tracemalloc.get_traced_memory()[::-1]
            tracemalloc.stop()
        return json.dumps(r)
    return step

load_peak = [0, 0]
load_step = ranged_steps(load_peak, lambda size: slices.resume(run, size), lambda: slices.resume(run))
"""

RESUMED = r"""
out["load_peak"], out["load_kept"] = load_peak
out["at_resumed"] = [run.at.epoch, run.at.epoch_step, run.at.step]
out["renewed_refused"], out["renewed_on_gpu"] = slices.refused, slices.moments_on_gpu
slices.run(module, opt, run.at, work)   # steps 9-12 again, on the new device
"""

# a divergence on the GPU (the learning rate far too high: the loss is no longer finite), then back to the good
# checkpoint the worker holds (Session.restore_good: the worker reads the GPU's state back and lets it go first, as its
# command does, then hands the checkpoint over range by range onto the device it has), at the run's learning rate
DIVERGE = r"""
out["after_renew"] = slices.finish()
opt.set_learning_rate(1e38)
slices.run(module, opt, run.at, Slice(list(range(8)), lambda i: data[i], 1e9, 2))   # steps 13-14
"""

BACK = r"""
out["diverged"] = [bool(np.isfinite(v)) for v in slices.finish()]
out["at_diverged"] = run.at.step
slices.sync(run.at, drop=True)   # (the worker's gpuToHeap(drop) before restoreGood)
"""

BACK_START = r"""
slices.commit()
out["back_dropped"] = slices.training is None
back_peak = [0, 0]
back_step = ranged_steps(back_peak, lambda size: slices.resume(run, size, back=True), lambda: slices.resume(run))
"""

BACK_DONE = r"""
out["back_peak"], out["back_kept"] = back_peak
out["at_back"] = [run.at.epoch, run.at.epoch_step, run.at.step]
out["back_refused"], out["back_on_gpu"] = slices.refused, slices.moments_on_gpu
out["back_lr"] = opt.get_learning_rate()
slices.run(module, opt, run.at, work)   # steps 9-12 once more, after going back
"""

# a saved run reopened (saved_run.restore with checkpoint_size, as the worker's resumeSaved does with a device): its
# model built from its artifacts' checkpoint, then its saved checkpoint (the epoch's end, step 8) handed over range by
# range, the moments up to the GPU one at a time. Against it, the heap's peak of the whole read it replaces: the
# checkpoint's bytes passed in, then decoded (the moments among them)
REOPEN = r"""
out["after_back"] = slices.finish()
from pytrain.run.loop import Position
L.set_limits(max_heap_bytes=saved_budget)
blob = base64.b64decode(good_b64)
tracemalloc.start()
whole_state = api.CheckpointState.load_checkpoint(bytes(blob))   # (bytes(): the bridge's copy into the heap)
out["whole_peak"] = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
del whole_state, blob
L.set_limits(max_heap_bytes=budget)
reopened, reopened_opt = fresh()   # (the artifacts' checkpoint: the build's parameters, no optimizer state)
reopened_run = TrainingRun()
reopened_run.module, reopened_run.optimizer, reopened_run.lr = reopened, reopened_opt, 0.01
reopened_run.resume(Position(1, 0, 8))
reopened_slices = GpuSlices()
reopen_peak = [0, 0]
reopen_step = ranged_steps(reopen_peak, lambda size: reopened_slices.reopen(reopened_run, size, data[0]),
                           lambda: reopened_slices.resume(reopened_run))
"""

REOPENED = r"""
out["reopen_peak"], out["reopen_kept"] = reopen_peak
out["reopened_on_gpu"], out["reopened_refused"] = reopened_slices.moments_on_gpu, reopened_slices.refused
out["reopened_step"] = [int(reopened.state.optimizer_state.step), reopened_run.at.step]
reopened_slices.run(reopened, reopened_opt, reopened_run.at, work)   # steps 9-12 of the reopened run
"""

END = r"""
out["after_reopen"] = reopened_slices.finish()
L.set_limits(max_heap_bytes=saved_budget)   # (the page is shared: later modules train under pytrain's own budget)
out["cpu_losses"] = cpu_losses
out["cpu_losses2"] = cpu_losses2
json.dumps(out)
"""

DESTROY = """async () => {
  window.__gpu.device.destroy();
  await window.__gpu.device.lost;
  try { await window.__settle(); return "settled"; } catch (e) { return String(e.message || e); }
}"""

# the worker's gpuRenew: navigator.gpu asked again (first with no adapter to give: refused), then the good checkpoint
# handed over range by range from the JS side
RENEW = """async b64 => {
  const blob = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const seen = {};
  navigator.gpu.requestAdapter = async () => null;
  try { await window.__gpu.renew(); seen.none = "renewed"; } catch (e) { seen.none = String(e.message || e); }
  delete navigator.gpu.requestAdapter;
  await window.__gpu.renew();
  const step = window.__pyodide.globals.get("load_step");
  let r = JSON.parse(step(blob.length));
  seen.ranges = [r.want];
  while (!r.done) {   // (as the worker's gpuRenew: each range copied into the heap where Python asks)
    window.__pyodide._module.HEAPU8.set(blob.subarray(r.want[0], r.want[1]), r.into);
    r = JSON.parse(step());
    if (r.want) seen.ranges.push(r.want);
  }
  seen.size = blob.length;
  seen.renewals = window.__gpu.renewals;
  return seen;
}"""


# the worker's restoreGood with the optimizer state on the GPU (training.js gpuRestoreGood, gpuLoadRanges)
BACK_LOAD = """async ([b64, name]) => {
  const blob = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const step = window.__pyodide.globals.get(name);
  let r = JSON.parse(step(blob.length));
  let n = 1;
  while (!r.done) {
    window.__pyodide._module.HEAPU8.set(blob.subarray(r.want[0], r.want[1]), r.into);
    r = JSON.parse(step());
    n++;
  }
  return n;
}"""


SAVE_LOOP = """async step => {
  for (let k = 0; k < 1000; k++) {
    const r = JSON.parse(window.__py(step + "()"));
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
    gpu_page.evaluate(SAVE_LOOP, "save_step")
    run(AFTER_SAVE)
    gpu_page.evaluate("window.__settle()")
    run(WHOLE)
    gpu_page.evaluate("window.__settle()")
    run(END_FIRST)
    gpu_page.evaluate("window.__settle()")
    gpu_page.evaluate(SAVE_LOOP, "good_step")
    good_b64 = run(GOOD)
    gpu_page.evaluate("window.__settle()")
    run('out["uninterrupted"] = slices.finish()')
    settled = gpu_page.evaluate(DESTROY)
    run(LOST)
    seen = gpu_page.evaluate(RENEW, good_b64)
    run(RESUMED)
    gpu_page.evaluate("window.__settle()")
    for code in (DIVERGE, BACK):
        run(code)
        gpu_page.evaluate("window.__settle()")
    run(BACK_START)
    back_calls = gpu_page.evaluate(BACK_LOAD, [good_b64, "back_step"])
    run(BACK_DONE)
    gpu_page.evaluate("window.__settle()")
    run(REOPEN)
    reopen_calls = gpu_page.evaluate(BACK_LOAD, [good_b64, "reopen_step"])
    run(REOPENED)
    gpu_page.evaluate("window.__settle()")
    out = json.loads(run(END))
    out.update(settled=settled, back_calls=back_calls, reopen_calls=reopen_calls, **seen)
    return out


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
    # the elements whose gradient was at float32's accumulation noise (a whole step of lr each way) are a handful
    for name, (n, size) in big["noise"].items():
        assert n <= max(4, size // 1000), (name, n, size)
    print("gradient elements at accumulation noise: %s" % big["noise"])
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


def test_a_device_lost_with_the_state_on_it_resumes_on_a_new_device_from_the_good_checkpoint(big):
    assert "lost" in big["settled"], big["settled"]   # (the device destroyed for real)
    # until a new device resumes, the CPU cannot go on (the heap never held the state): said by name
    assert big["renew"] and "with the optimizer state on it" in big["lost"], big["lost"]
    assert "resume the run from its last save" in big["lost"]
    assert "lives on the GPU only" in big["cpu_after_loss"], big["cpu_after_loss"]
    assert "no adapter" in big["none"], big["none"]   # (no device to be had: the worker refuses with big["lost"])
    # a new device, the run back at the last good checkpoint (the epoch's end), handed over range by range
    assert big["renewals"] >= 1 and big["at_resumed"] == [1, 0, 8]
    assert big["renewed_refused"] is None and big["renewed_on_gpu"]
    largest = big["least"] - big["parameters"]
    widths = [b - a for a, b in big["ranges"]]
    assert max(widths) <= largest + 1024 < big["size"], (max(widths), largest, big["size"])
    # the heap's peak during the resume (tracemalloc): one moment and what the new device's training keeps (its
    # plans), with at most the zip's 64 KiB tail besides, never the checkpoint or the state
    assert big["load_peak"] <= largest + big["load_kept"] + 64 * 1024 < big["state"], (big["load_peak"], largest)
    # ... and trains on with the uninterrupted run's losses (the CPU's, and the GPU's before the loss)
    assert len(big["after_renew"]) == 4
    for c, u, r in zip(big["cpu_losses2"], big["uninterrupted"], big["after_renew"]):
        assert abs(r - c) <= 1e-5 * abs(c) and abs(r - u) <= 1e-5 * abs(u), (c, u, r)
    print("resumed on a new device: %d ranges of the %d-byte checkpoint (largest %d B), heap peak %d B (largest "
          "moment %d B, the new training keeps %d B), losses %s" % (len(widths), big["size"], max(widths),
                                                                    big["load_peak"], largest, big["load_kept"],
                                                                    big["after_renew"]))


def test_an_epochs_end_streams_a_good_checkpoint_equal_to_the_cpu_runs(big):
    assert big["good_due"]   # (Session.gpu_finish says good_streamed: the worker streams it and keeps it)
    params, moments, step = big["good"]
    assert step == 8 and len(moments) == 2 * len(params)
    for name, err in list(params.items()) + list(moments.items()):
        assert err <= 1e-4, (name, err)


def test_going_back_after_a_divergence_streams_the_good_checkpoint_onto_the_device(big):
    # the GPU's losses stop being finite at the learning rate 1e38 (a divergence: the page stops the run)
    assert big["diverged"][0] and not big["diverged"][-1] and big["at_diverged"] == 14, big["diverged"]
    assert big["back_dropped"]   # (read back and let go before going back, as the worker's command does)
    # back at the epoch's end on the same device, the optimizer state still on the GPU only, the run's learning rate
    assert big["at_back"] == [1, 0, 8] and big["back_refused"] is None and big["back_on_gpu"]
    assert abs(big["back_lr"] - 0.01) <= 1e-9
    largest = big["least"] - big["parameters"]
    assert big["back_peak"] <= largest + big["back_kept"] + 64 * 1024 < big["state"], (big["back_peak"], largest)
    # ... and trains on with the CPU run's losses (and the uninterrupted GPU run's)
    assert len(big["after_back"]) == 4
    for c, u, r in zip(big["cpu_losses2"], big["uninterrupted"], big["after_back"]):
        assert abs(r - c) <= 1e-5 * abs(c) and abs(r - u) <= 1e-5 * abs(u), (c, u, r)
    print("back to the good checkpoint after a divergence: %d calls, heap peak %d B (largest moment %d B, the new "
          "training keeps %d B), losses %s" % (big["back_calls"], big["back_peak"], largest, big["back_kept"],
                                               big["after_back"]))


def test_a_saved_run_reopened_with_the_state_on_the_gpu_takes_its_checkpoint_range_by_range(big):
    # the moments went up to the device one at a time: the heap held one range, never the checkpoint or the state
    assert big["reopened_on_gpu"] and big["reopened_refused"] is None and big["reopened_step"] == [8, 8]
    largest = big["least"] - big["parameters"]
    assert big["reopen_peak"] <= largest + big["reopen_kept"] + 64 * 1024 < big["state"], (big["reopen_peak"], largest)
    assert big["parameters"] + big["reopen_peak"] <= big["budget"] < big["whole_peak"]   # (the whole read: over it)
    # ... and the reopened run goes on with the uninterrupted run's losses (the CPU's and the GPU's)
    assert len(big["after_reopen"]) == 4
    for c, u, r in zip(big["cpu_losses2"], big["uninterrupted"], big["after_reopen"]):
        assert abs(r - c) <= 1e-5 * abs(c) and abs(r - u) <= 1e-5 * abs(u), (c, u, r)
    print("saved run reopened range by range: %d calls, heap peak %d B (the whole read's %d B; largest moment %d B, "
          "the training keeps %d B, budget %d B), losses %s" % (big["reopen_calls"], big["reopen_peak"],
                                                               big["whole_peak"], largest, big["reopen_kept"],
                                                               big["budget"], big["after_reopen"]))
