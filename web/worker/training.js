/* The training loop: slices of about 150 ms of pytrain steps (Session.train_for), so pause, stop
 * and predictions are answered between slices; progress and epoch events; a save after every
 * epoch, every `saveEveryMs` (10 s) of training within an epoch (so a reload resumes at most that
 * much earlier, at the saved step), and on pause and stop. Its options come resolved by Python
 * (pytrain.webapp.run_options.TabRun, through the train command). */
"use strict";

let trainer = null;         // the running training loop, if any

function yieldToEvents() { return new Promise((r) => setTimeout(r, 0)); }

async function trainLoop(opts) {
  const t = { options: opts, paused: false, stopRequested: false, resumeWaiters: [] };
  const persist = opts.persist;   // the page saves its runs in IndexedDB; the widget only when asked
  let saveWarned = false;
  let lastSave = performance.now();
  const save = async (why) => {
    if (!persist) return null;
    lastSave = performance.now();
    try { return await saveRun(why); } catch (e) {
      // Private browsing or a full disk: keep training, say once that progress is not kept.
      if (!saveWarned) emit("error", { type: "StorageError", message: "Progress could not be saved in this browser (" + (e.message || e) + "); training continues.", expected: true });
      saveWarned = true;
      return null;
    }
  };
  trainer = t;
  emit("state", { training: true, paused: false });
  let reason = "finished";
  let divergence = null;
  let recent = [];   // (time, steps, seconds) over the last few seconds, for steps/s
  try {
    let status = py("status");
    const startStep = status.step;
    while (status.epoch < opts.epochs) {
      if (t.stopRequested) { reason = "stopped"; break; }
      if (t.paused) {
        await save("paused");
        emit("state", { training: true, paused: true });
        await new Promise((r) => t.resumeWaiters.push(r));
        emit("state", { training: true, paused: false });
        recent = [];
        continue;
      }
      // (a run's first slice is its first step alone: the page shows it as soon as it is done)
      const r = await gpuExclusive(() => trainSlice(opts.budgetMs, status.step === startStep ? 1 : undefined));
      if (r === null) continue;   // the GPU failed: the CPU trains from the last state read back
      if (r.loading && !r.losses.length) {   // trained on all of the digits' first part: the rest joins now
        await completeDigits();
        continue;
      }
      loadRest();   // after the first step: what it did not need (the whole digits, the stdlib's second part)
      const now = performance.now();
      recent.push([now, r.losses.length, r.seconds]);
      while (recent.length > 1 && now - recent[0][0] > 3000) recent.shift();
      const steps = recent.reduce((a, w) => a + w[1], 0);
      const secs = recent.reduce((a, w) => a + w[2], 0);
      const first = r.step - r.losses.length + 1;
      recordSteps(first, r.losses);
      emit("progress", {
        step: r.step, epoch: r.epoch, epochStep: r.epoch_step, stepsPerEpoch: r.steps_per_epoch,
        losses: r.losses, firstStep: first, stepsPerSecond: secs > 0 ? steps / secs : 0, epochs: opts.epochs,
        wasmHeap: wasmHeapBytes(),   // the WebAssembly memory never shrinks: its size is the peak so far
      });
      // A diverged run is an outcome to show with the training, not an error banner.
      if (r.diverged) { reason = "diverged"; divergence = r.diverged; break; }
      if (r.epoch_end) {
        await completeDigits();   // (the held-out digits may not be in yet; a stdlib import fetches its part: the guard)
        await gpuToHeap();
        if (r.good_streamed) await gpuKeepGood();   // (the optimizer state on the GPU only: kept here, not in the heap)
        const ev = py("evaluate");
        const rec = { epoch: r.epoch, step: r.step, loss: ev.loss, metric: ev.metric, metricName: ev.metric_name, mae: ev.mae };
        recordEpoch(rec);
        emit("epoch", rec);
        const good = runtime.gpuGood;   // (the epoch's save: the same bytes)
        runtime.gpuSaveAs = r.good_streamed && good && good.step === r.step ? good : null;
        try { await save("epoch"); } finally { runtime.gpuSaveAs = null; }
      } else if (now - lastSave > opts.saveEveryMs) await save("progress");   // mid-epoch, at this step
      status = r;
      await yieldToEvents();   // lets pause/stop/predict messages in between slices
    }
    if (reason === "stopped") await save("stopped");
  } catch (e) {
    reason = "error";
    emit("error", errorInfo(e));
  } finally {
    trainer = null;
    emit("state", { training: false, paused: false });
    const s = pythonReady() ? safeStatus() : {};
    emit("done", { reason, epoch: s.epoch, step: s.step, divergence });
  }
}

/** One slice: Python's train_for, and on the WebGPU device the wait for its losses (the parameters stay there);
 * null when the device failed (the steps since the last read back are undone). */
async function trainSlice(budgetMs, maxSteps) {
  if (runtime.gpuRenew) await gpuRenew();
  const sliceStart = performance.now();
  const r = py("train_for", { budget_ms: budgetMs, max_steps: maxSteps });
  if (r.pending !== undefined) {   // enqueued on the WebGPU device: its losses come back now
    try {
      await runtime.gpu.settle();
    } catch (e) {
      gpuLost(e);
      return null;
    }
    Object.assign(r, py("gpu_finish"), { seconds: (performance.now() - sliceStart) / 1000 });
  } else if (r.gpu_refused && runtime.gpu) gpuFallback(r.gpu_refused);
  return r;
}

/* The device's work in turn: a slice, or a read back, runs from its enqueueing to its settle before the next starts
 * (a command between slices waits for the slice in flight). */
let gpuTurn = Promise.resolve();
function gpuExclusive(fn) {
  const p = gpuTurn.then(fn);
  gpuTurn = p.catch(() => {});
  return p;
}

/** The parameters and optimizer state the GPU trained read back into the wasm heap, when they are newer there: before
 * anything on the CPU reads them (a save, an evaluation, an export, a prediction). `drop`: the command changes the state
 * or the model, so the GPU training lets go of them (the next slice uploads anew). */
async function gpuToHeap(drop = false) {
  if (!runtime.gpu || !pythonReady()) return;
  await gpuExclusive(async () => {
    if (!py("gpu_sync", { drop }).pending) return;
    runtime.gpuReadbacks = (runtime.gpuReadbacks || 0) + 1;
    try {
      await runtime.gpu.settle();
    } catch (e) {
      gpuLost(e);
      return;
    }
    py("gpu_commit");
  });
}

/** The checkpoint streamed from the GPU when the optimizer state lives there only (past the wasm heap's budget): each
 * moment read back alone, written into the checkpoint and let go, its pieces copied out of the heap and joined here
 * (pytrain/webapp/gpu_save.py); null when the heap holds the optimizer state (Python's checkpoint is whole). Call after
 * gpuToHeap (the parameters). */
async function gpuCheckpoint(good = false) {
  if (!runtime.gpu || !pythonReady()) return null;
  if (runtime.gpuSaveAs) return runtime.gpuSaveAs.checkpoint;   // (this very step's, just streamed: gpuKeepGood)
  return gpuExclusive(async () => {
    let r = py("gpu_save", { start: true, good });
    if (r.on_heap) return null;
    const parts = [];
    for (;;) {
      parts.push(...r.chunks);
      if (r.done) break;
      if (r.pending) {
        try {
          await runtime.gpu.settle();
        } catch (e) {
          gpuLost(e);
          throw e;
        }
      }
      r = py("gpu_save", { good });
    }
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  });
}

/** An epoch's end with the optimizer state on the GPU only: its checkpoint streamed (gpuCheckpoint) is the run's last
 * good one, kept here in the worker (the wasm heap never holds it whole); Python keeps its position. */
async function gpuKeepGood() {
  const checkpoint = await gpuCheckpoint(true);
  if (checkpoint) runtime.gpuGood = Object.assign({ checkpoint }, py("last_good"));
}

/** The device failed: Python rewinds to the last state read back; the plots' later steps go (the CPU retrains them).
 * With the optimizer state on it (`renew`), the next slice first asks for a new device (gpuRenew). */
function gpuLost(e) {
  const r = py("gpu_lost", { reason: String(e.message || e) });
  runtime.gpuRewound = r.step;
  const good = runtime.gpuGood;
  if (r.renew && good && good.step === r.good.step && good.epoch === r.good.epoch) runtime.gpuRenew = r.device;
  else gpuFallback(r.device);
}

/** A new device (navigator.gpu asked again) and the run resumed on it from the last good checkpoint, which the worker
 * holds: handed to Python range by range as it asks (pytrain/webapp/gpu_load.py), never whole in the heap. Without a
 * new device, the loss is refused by name as before (the CPU cannot read the optimizer state). */
async function gpuRenew() {
  const refused = runtime.gpuRenew, blob = runtime.gpuGood.checkpoint;
  runtime.gpuRenew = null;
  try {
    await runtime.gpu.renew();
  } catch (e) {
    console.warn("pytrain: no new WebGPU device:", e);
    gpuFallback(refused);
    return;
  }
  const r = gpuLoadRanges(blob, py("gpu_resume", { size: blob.length }));
  runtime.gpuRewound = r.step;
  console.warn("pytrain: the GPU device was lost; a new one resumes from the last good checkpoint, step " + r.step);
}

/** A checkpoint the worker holds handed to Python as it asks (pytrain/webapp/gpu_load.py), from its first answer `r`:
 * each range copied straight into the box Python made for it in the heap; Python's last answer (`done`). */
function gpuLoadRanges(blob, r) {
  while (!r.done) {
    runtime.pyodide._module.HEAPU8.set(blob.subarray(r.want[0], r.want[1]), r.into);
    r = py("gpu_resume");
  }
  return r;
}

/** Going back to the last good checkpoint (after a divergence): with the optimizer state on the GPU only it is the
 * one the worker kept at the epoch's end (gpuKeepGood), handed over range by range onto the device (a lost one first
 * renewed); Python refuses by name where there is no device. Else Python's, from the heap. */
async function gpuRestoreGood() {
  if (runtime.gpuRenew) await gpuRenew();
  const good = runtime.gpuGood, at = py("last_good");
  const held = good && good.step === at.step && good.epoch === at.epoch ? good.checkpoint : null;
  const r = py("restore_good", held ? { size: held.length } : {});
  return r.want ? gpuExclusive(async () => gpuLoadRanges(held, r)) : r;
}

/** A saved run reopened from its checkpoint `blob` (IndexedDB's), handed over as Python asks from its first answer
 * `r` (Session.restore with checkpoint_size): with the optimizer state on the GPU only, the blob is the run's last
 * good checkpoint, kept here as an epoch's end keeps it (gpuKeepGood). The answer: restore's, with Python's last. */
function gpuReopen(blob, r) {
  runtime.gpuGood = null;   // (the run before this one's: its device renewal too)
  runtime.gpuRenew = null;
  const done = gpuLoadRanges(blob, r);
  if (done.good_streamed) runtime.gpuGood = Object.assign({ checkpoint: blob }, py("last_good"));
  return Object.assign({ data: r.data }, done);
}

/** Say once why the WebGPU device does not train (lost, or a model it cannot run): the CPU trains on. */
function gpuFallback(reason) {
  if (runtime.gpuLost === reason) return;
  runtime.gpuLost = reason;
  console.warn("pytrain:", reason);
  runtime.deviceReason = reason;
  emit("device", describeDevice(false));
  emit("error", { type: "GpuFallback", message: reason + "; training continues on the CPU.", expected: true });
}

/** The running loop's options (saved with the run), or null. */
function trainingOptions() { return trainer ? trainer.options : null; }

function isTraining() { return trainer !== null; }

function pauseTraining() { if (trainer) trainer.paused = true; return !!trainer; }

/** Wake a paused loop; with `stop`, it stops at its next slice. */
function resumeTraining(stop = false) {
  if (!trainer) return false;
  if (stop) trainer.stopRequested = true;
  trainer.paused = false;
  trainer.resumeWaiters.splice(0).forEach((r) => r());
  return true;
}

/** New batch size or learning rate for the running loop's next slices (and the saved run). */
function configureTraining({ batchSize, learningRate }) {
  if (trainer) Object.assign(trainer.options, batchSize ? { batchSize } : {}, learningRate ? { learningRate } : {});
}

/* Pyodide's WebAssembly heap for pytrain.limits (pytrain/webapp/memory.py): the bytes in use (the break, below
 * which are the static data, the stack and malloc's arena, less what malloc holds free in its arena: dlmalloc's
 * mallinfo, whose 9th word is fordblks), the memory's size, and the site's limit (config.json maxHeapBytes, 0 for
 * pytrain's own). */
function pytrainWasmHeap() {
  const m = runtime.pyodide._module;
  const info = m._malloc(64);
  let free = 0;
  try { m._mallinfo(info); free = m.HEAPU32[(info >> 2) + 8]; } finally { m._free(info); }
  return { used: m._sbrk(0) - free, size: wasmHeapBytes(), limit: (runtime.config && runtime.config.maxHeapBytes) || 0 };
}

function safeStatus() { try { return py("status"); } catch (e) { return {}; } }
