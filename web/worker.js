/* pytrain worker: runs Pyodide + pytrain off the main thread.
 *
 * One protocol for the page and the widget (see js/client.js):
 *   page -> worker  {id, cmd, args}
 *   worker -> page  {id, ok: true, result} | {id, ok: false, error: {type, message}}
 *   worker -> page  {event, data}   loading, ready, startup (stage timings), fatal, progress, epoch, saved, state, done, error
 *
 * A classic (non-module) worker because Pyodide 0.17 loads itself with importScripts.
 */
"use strict";

const BASE = new URL("./", self.location.href).href;
const DB_NAME = "pytrain-web";
const DB_STORE = "run";

let config = null;
let pyodide = null;
let pyCallProxy = null;
let ready = null;           // Promise resolved once pytrain is importable
let digitsBlob = null;      // the MNIST binary, fetched once
let trainer = null;         // the running training loop, if any
let history = { losses: [], epochs: [] };
let savedVersions = { data: -1, artifacts: -1 };

function post(msg, transfer) { self.postMessage(msg, transfer || []); }
function emit(event, data) { post({ event, data: data === undefined ? null : data }); }

class UserError extends Error {
  constructor(message, type) { super(message); this.type = type || "Error"; this.expected = true; }
}

// ------------------------------------------------------------------ loading progress

/* Byte-level progress over the files Pyodide fetches. Pyodide 0.17 exposes no progress hook
 * for its runtime, so fetch and XMLHttpRequest are wrapped while it loads. */
const progress = {
  files: new Map(),   // absolute URL -> {size, loaded, done}
  stage: "Starting",
  stagesDone: 0,
  stagesTotal: 5,
  lastPost: 0,
  register(url, size) { this.files.set(url, { size: Math.max(1, size || 1), loaded: 0, done: false }); },
  update(url, fraction) {
    const f = this.files.get(url);
    if (!f || f.done) return;
    f.loaded = Math.min(f.size, Math.max(f.loaded, fraction * f.size));
    this.report(false);
  },
  finish(url) {
    const f = this.files.get(url);
    if (f) { f.loaded = f.size; f.done = true; }
    this.report(false);
  },
  finishAll() { for (const f of this.files.values()) { f.loaded = f.size; f.done = true; } },
  marks: {},         // stage -> ms since the worker started, sent with "ready" for start-up profiling
  mark(name) { this.marks[name] = Math.round(performance.now()); },   // a finer step inside a stage
  setStage(stage) {
    this.marks[stage] = Math.round(performance.now());
    this.stage = stage; this.stagesDone += 1; this.report(true);
  },
  fraction() {
    let total = 0, loaded = 0;
    for (const f of this.files.values()) { total += f.size; loaded += f.loaded; }
    const bytes = total ? loaded / total : 0;
    // Downloads dominate the wait; the rest is compile + import time.
    return Math.min(1, 0.85 * bytes + 0.15 * (this.stagesDone / this.stagesTotal));
  },
  report(force) {
    const now = Date.now();
    if (!force && now - this.lastPost < 100) return;
    this.lastPost = now;
    let total = 0, loaded = 0;
    for (const f of this.files.values()) { total += f.size; loaded += f.loaded; }
    emit("loading", { stage: this.stage, fraction: this.fraction(), loaded: Math.round(loaded), total });
  },
};

function trackDownloads() {
  const origFetch = self.fetch.bind(self);
  self.fetch = async function (input, init) {
    const resp = await origFetch(input, init);
    const url = new URL(typeof input === "string" ? input : input.url, BASE).href;
    if (!progress.files.has(url) || !resp.body) return resp;
    // The runtime's .wasm goes to WebAssembly.instantiateStreaming as the browser's own Response:
    // a re-wrapped one has no URL, so Chrome could neither cache its compiled code nor reuse it.
    if (url.endsWith(".wasm")) { progress.finish(url); return resp; }
    const reader = resp.body.getReader();
    const total = progress.files.get(url).size;
    let got = 0;
    const stream = new ReadableStream({
      async pull(ctrl) {
        const { done, value } = await reader.read();
        if (done) { progress.finish(url); ctrl.close(); return; }
        got += value.byteLength;
        progress.update(url, got / total);
        ctrl.enqueue(value);
      },
      cancel(reason) { reader.cancel(reason); },
    });
    return new Response(stream, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
  };
  const OrigXHR = self.XMLHttpRequest;
  self.XMLHttpRequest = class TrackedXHR extends OrigXHR {
    open(method, url, ...rest) {
      const abs = new URL(url, BASE).href;
      if (progress.files.has(abs)) {
        this.addEventListener("progress", (e) => {
          if (e.lengthComputable && e.total) progress.update(abs, e.loaded / e.total);
          else progress.update(abs, e.loaded / progress.files.get(abs).size);
        });
        this.addEventListener("loadend", () => progress.finish(abs));
      }
      return super.open(method, url, ...rest);
    }
  };
  return () => { self.fetch = origFetch; self.XMLHttpRequest = OrigXHR; };
}

/* Link the WebAssembly SIMD GEMM (kernels/gemm.wasm) into Pyodide's heap and make it pytrain's
 * matrix product; numpy's own product stays the fallback when that is not possible. */
async function installWasmGemm() {
  try {
    self.importScripts(BASE + "kernels/gemm.js");
    await self.pytrainGemm.registerWithPyodide(pyodide, BASE + "kernels/gemm.wasm");
    progress.mark("kernels loaded");
    if (pyodide.runPython("from pytrain.ops import wasm\nwasm.install()")) return "wasm-simd";
  } catch (err) {
    console.warn("pytrain: the wasm GEMM is unavailable, numpy does the products:", err);
  }
  return "numpy";
}

/* Start a download now and keep its bytes for later (a rejection is reported where it is awaited). */
function prefetch(url) {
  const p = fetch(url).then((r) => {
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    return r.arrayBuffer();
  });
  p.catch(() => {});
  return p;
}

/* The stdlib and numpy modules the start imports, precompiled for Python 3.8 by build.py
 * (build_startup_bytecode): unchecked-hash .pyc files written next to Pyodide's sources, so
 * importing numpy unmarshals them instead of compiling every .py on every visit. */
function writeBytecode(FS, bundle) {
  const magic = new TextDecoder().decode(bundle.subarray(0, 8));
  if (magic !== "PTPYC001") throw new Error("the bytecode bundle has an unknown format");
  const headLength = new DataView(bundle.buffer, bundle.byteOffset + 8, 4).getUint32(0, true);
  const index = JSON.parse(new TextDecoder().decode(bundle.subarray(12, 12 + headLength)));
  const body = 12 + headLength;
  for (const [path, offset, length] of index) {
    FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    FS.writeFile(path, bundle.subarray(body + offset, body + offset + length));
  }
}

/* Pyodide 0.17's loadPyodide() offers no hook before CPython starts, and CPython's own start
 * (encodings, site, the `pyodide` package and the stdlib it imports) is where the bytecode helps
 * most. So: when loadPyodide imports pyodide.asm.js, wrap the emscripten factory it defines to add
 * a preRun step that writes the bundle (a run dependency holds CPython's start until it is
 * written). Anything unexpected leaves Pyodide untouched: it then compiles the sources itself. */
function bytecodeBeforePythonStarts(bundle) {
  const importScripts = self.importScripts;
  self.importScripts = function (...urls) {
    importScripts.apply(self, urls);
    const create = self._createPyodideModule;
    if (!urls.some((u) => /pyodide\.asm\.js$/.test(u)) || typeof create !== "function") return;
    self._createPyodideModule = function (Module) {
      Module.preRun = [].concat(Module.preRun || [], () => {
        Module.addRunDependency("pytrain-bytecode");
        bundle.then((bytes) => writeBytecode(Module.FS, new Uint8Array(bytes)))
          .catch((e) => console.warn("pytrain: no precompiled bytecode, Python compiles its sources:", e))
          .finally(() => Module.removeRunDependency("pytrain-bytecode"));
      });
      self._createPyodideModule = create;
      return create(Module);
    };
  };
  return () => { self.importScripts = importScripts; };
}

async function loadRuntime() {
  progress.setStage("Loading the Python runtime");
  const resp = await fetch(BASE + "config.json", { cache: "no-cache" });
  if (!resp.ok) throw new Error(`config.json: HTTP ${resp.status}`);
  config = await resp.json();
  const indexURL = new URL(config.pyodide.indexURL, BASE).href;
  for (const f of config.pyodide.files || []) progress.register(new URL(f.name, indexURL).href, f.size);
  // pytrain's modules as one zip imported in place (zipimport): compiled for Python 3.8 when the
  // build could (python.zip), else the wheel's sources. No micropip, no unpacking.
  const pyZip = config.python || { zip: config.wheel, size: config.wheelSize };
  const zipURL = new URL(pyZip.zip, BASE).href;
  progress.register(zipURL, pyZip.size || 300000);
  const untrack = trackDownloads();
  try {
    // Pyodide's own start (compiling its wasm, starting CPython) is the floor: every other
    // download runs during it. numpy's .data goes to its loader through getPreloadedPackage.
    const packages = config.pyodide.packages || ["numpy"];
    const early = new Map(packages.map((name) => [indexURL + name + ".data", prefetch(indexURL + name + ".data")]));
    const zipBytes = prefetch(zipURL);
    const bytecode = config.bytecode ? prefetch(new URL(config.bytecode.file, BASE).href) : null;
    const unhook = bytecode ? bytecodeBeforePythonStarts(bytecode) : () => {};
    try {
      self.importScripts(indexURL + "pyodide.js");
      pyodide = await self.loadPyodide({ indexURL });
    } finally {
      unhook();
    }
    progress.setStage("Loading numpy");
    const fetched = new Map();
    for (const [url, bytes] of early) fetched.set(url, await bytes);
    pyodide._module.getPreloadedPackage = (name) => {
      const bytes = fetched.get(new URL(name, indexURL).href);
      fetched.delete(new URL(name, indexURL).href);
      return bytes || null;
    };
    const errors = [];
    try {
      await pyodide.loadPackage(packages, () => {}, (m) => errors.push(String(m)));
    } finally {
      delete pyodide._module.getPreloadedPackage;
    }
    if (errors.length) throw new Error("loading Python packages failed: " + errors.join("; "));
    progress.setStage("Installing pytrain");
    const zipPath = pyZip.path || "/lib/pytrain.zip";
    pyodide._module.FS.writeFile(zipPath, new Uint8Array(await zipBytes));
    pyodide.runPython(`import sys\nsys.path.insert(0, ${JSON.stringify(zipPath)})\n`);
    progress.setStage("Starting pytrain");
    const gemm = await installWasmGemm();
    progress.mark("kernels linked");
    pyodide.runPython(
      "from pytrain import webapp as _pt_webapp\n" +
      "_pt_session = _pt_webapp.Session()\n" +
      "def _pt_call(method, args_json, blobs):\n" +
      "    return _pt_webapp.call(_pt_session, method, args_json, blobs)\n");
    progress.mark("session made");
    pyCallProxy = pyodide.globals.get("_pt_call");
    const versions = JSON.parse(pyodide.runPython(
      "import json, sys, numpy, pytrain\n" +
      "json.dumps({'python': sys.version.split()[0], 'numpy': numpy.__version__, 'pytrain': pytrain.__version__})"));
    // Pyodide 0.17.1's runtime still reports "0.17.0"; the distribution's folder names the real one.
    const dist = /pyodide\/(\d+\.\d+\.\d+[^/]*)\/$/.exec(config.pyodide.indexURL || "");
    versions.pyodide = dist ? dist[1] : pyodide.version;
    versions.gemm = gemm;
    progress.finishAll();
    progress.setStage("Ready");
    emit("ready", versions);
    // timeOrigin lets a harness place these marks on the page's clock (ms since navigation)
    emit("startup", Object.assign({ timeOrigin: performance.timeOrigin }, progress.marks));
    return versions;
  } finally {
    untrack();
  }
}

// ------------------------------------------------------------------ calling Python

const DTYPES = [
  [Float32Array, "<f4"], [Float64Array, "<f8"], [Int32Array, "<i4"], [Uint8Array, "|u1"],
  [Int8Array, "|i1"], [Uint16Array, "<u2"], [Int16Array, "<i2"], [Uint32Array, "<u4"],
];

/* Replace binary values in args by {"$blob": i} placeholders (see pytrain.webapp.call).
 * An ArrayBuffer or Uint8Array means bytes; {$array: TypedArray, shape} means a numpy array. */
function encodeArgs(value, blobs) {
  if (value instanceof ArrayBuffer) { blobs.push(new Uint8Array(value)); return { $blob: blobs.length - 1 }; }
  if (value instanceof Uint8Array) { blobs.push(value); return { $blob: blobs.length - 1 }; }
  if (value && value.$array !== undefined) {
    const arr = value.$array;
    const entry = DTYPES.find(([T]) => arr instanceof T);
    if (!entry) throw new Error("unsupported array type for Python: " + Object.prototype.toString.call(arr));
    blobs.push(new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength));
    return { $blob: blobs.length - 1, dtype: entry[1], shape: value.shape || [arr.length] };
  }
  if (ArrayBuffer.isView(value)) return encodeArgs({ $array: value }, blobs);
  if (Array.isArray(value)) return value.map((v) => encodeArgs(v, blobs));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = encodeArgs(v, blobs);
    return out;
  }
  return value;
}

function decodeResult(value, blobs) {
  if (Array.isArray(value)) return value.map((v) => decodeResult(v, blobs));
  if (value && typeof value === "object") {
    if (value.$blob !== undefined) return blobs[value.$blob];
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = decodeResult(v, blobs);
    return out;
  }
  return value;
}

/* Synchronous call into the Python session; throws UserError with Python's message. */
function py(method, args) {
  if (!pyCallProxy) throw new UserError("pytrain is still loading", "NotReady");
  const blobs = [];
  const argsJSON = JSON.stringify(encodeArgs(args || {}, blobs));
  const res = pyCallProxy(method, argsJSON, blobs);
  let pair;
  try { pair = res.toJs(); } finally { res.destroy(); }
  const [text, outBlobs] = pair;
  // toJs() views may point into the wasm heap: copy before Python frees or the heap grows.
  const copies = Array.from(outBlobs, (b) => new Uint8Array(b).slice());
  const reply = JSON.parse(text);
  if (!reply.ok) {
    if (reply.error.trace) console.error(reply.error.trace);
    const err = new UserError(reply.error.message, reply.error.type);
    err.expected = reply.error.expected;
    throw err;
  }
  return decodeResult(reply.result, copies);
}

// ------------------------------------------------------------------ IndexedDB (saved run)

function openDB() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(DB_STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function dbGet(keys) {
  const db = await openDB();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(DB_STORE, "readonly");
      const store = tx.objectStore(DB_STORE);
      const out = {};
      for (const k of keys) store.get(k).onsuccess = (e) => { out[k] = e.target.result; };
      tx.oncomplete = () => resolve(out);
      tx.onerror = () => reject(tx.error);
    });
  } finally { db.close(); }
}

/* One transaction, so a reload mid-write leaves either the old run or the new one. */
async function dbPut(entries, clear) {
  const db = await openDB();
  try {
    await new Promise((resolve, reject) => {
      const tx = db.transaction(DB_STORE, "readwrite");
      const store = tx.objectStore(DB_STORE);
      if (clear) store.clear();
      for (const [k, v] of Object.entries(entries)) store.put(v, k);
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error || new Error("IndexedDB write aborted"));
    });
  } finally { db.close(); }
}

async function saveRun(reason) {
  const snap = py("snapshot", { data_version: savedVersions.data, artifacts_version: savedVersions.artifacts });
  const meta = Object.assign({}, snap.meta, {
    savedAt: Date.now(), reason, history, train: trainer ? trainer.options : null,
  });
  const entries = { meta, checkpoint: snap.checkpoint };
  if (snap.artifacts) entries.artifacts = snap.artifacts;
  if (snap.data !== undefined) entries.data = snap.data;
  // Artifacts or data changed since the last save: this is a new run, replace everything.
  await dbPut(entries, snap.artifacts !== undefined);
  savedVersions = { data: meta.data_version, artifacts: meta.artifacts_version };
  const info = { epoch: meta.epoch, step: meta.step, epochStep: meta.epoch_step, digest: meta.digest, savedAt: meta.savedAt, reason };
  emit("saved", info);
  return info;
}

function summarizeMeta(meta) {
  if (!meta) return null;
  return {
    epoch: meta.epoch, step: meta.step, epochStep: meta.epoch_step, digest: meta.digest, savedAt: meta.savedAt,
    model: meta.model, dataSource: meta.data_source, train: meta.train, history: meta.history, reason: meta.reason,
  };
}

// ------------------------------------------------------------------ data and artifacts fetched from the site

async function fetchBytes(url) {
  const resp = await fetch(new URL(url, BASE).href);
  if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
  return new Uint8Array(await resp.arrayBuffer());
}

async function getDigits() {
  if (!digitsBlob) digitsBlob = await fetchBytes(config.mnist.file);
  return digitsBlob;
}

async function prebuiltArtifacts(kind) {
  const entry = (config.artifacts || {})["digits-" + kind];
  if (!entry) return null;
  const keys = ["training", "eval", "optimizer", "checkpoint"];
  const bytes = await Promise.all(keys.map((key) => fetchBytes(entry[key])));   // four requests at once
  const out = {};
  keys.forEach((key, i) => { out[key] = bytes[i]; });
  return out;
}

/* Decode uploaded images to float32 [N, C, H, W] in [0, 1] (no Pillow in the browser). */
async function decodeImages(files, shape) {
  const [c, h, w] = shape;
  const canvas = new OffscreenCanvas(w, h);
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const x = new Float32Array(files.length * c * h * w);
  const labels = [];
  for (let i = 0; i < files.length; i++) {
    const f = files[i];
    let bitmap;
    try {
      bitmap = await createImageBitmap(new Blob([f.data], { type: f.type || "" }));
    } catch (e) {
      throw new UserError(`${f.path || f.name}: not an image the browser can decode`, "DataError");
    }
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, w, h);
    ctx.drawImage(bitmap, 0, 0, w, h);
    bitmap.close();
    const px = ctx.getImageData(0, 0, w, h).data;
    const base = i * c * h * w;
    for (let p = 0; p < h * w; p++) {
      const r = px[4 * p] / 255, g = px[4 * p + 1] / 255, b = px[4 * p + 2] / 255;
      if (c === 1) x[base + p] = 0.299 * r + 0.587 * g + 0.114 * b;
      else { x[base + p] = r; x[base + h * w + p] = g; x[base + 2 * h * w + p] = b; }
    }
    labels.push(imageLabel(f));
  }
  return { x, labels };
}

/* The label of an image: its folder ("3/img.png") or the file name's prefix ("3_img.png"). */
function imageLabel(f) {
  const parts = (f.path || f.name).split("/").filter(Boolean);
  if (parts.length > 1) return parts[parts.length - 2];
  const m = /^([^_\-. ]+)[_\-. ]/.exec(parts[0]);
  if (!m) throw new UserError(`${parts[0]}: cannot tell the label; name files like "cat_1.png" or put them in a folder per label`, "DataError");
  return m[1];
}

function imageShapeFor(sampleShape) {
  const s = (sampleShape || []).filter((d) => d !== null);
  if (s.length === 3 && sampleShape.length === 3) return s;
  if (s.length === 2 && sampleShape.length === 2) return [1, s[0], s[1]];
  if (s.length === 1 && sampleShape.length === 1) {
    const side = Math.round(Math.sqrt(s[0]));
    if (side * side === s[0]) return [1, side, side];
    if (s[0] % 3 === 0) {
      const rgb = Math.round(Math.sqrt(s[0] / 3));
      if (3 * rgb * rgb === s[0]) return [3, rgb, rgb];
    }
  }
  throw new UserError(`the model's input shape [N, ${(sampleShape || []).join(", ")}] does not look like images; ` +
                      "use a CSV file instead", "DataError");
}

// ------------------------------------------------------------------ the training loop

function yieldToEvents() { return new Promise((r) => setTimeout(r, 0)); }

async function trainLoop(options) {
  const opts = Object.assign({ epochs: 5, budgetMs: 150 }, options);
  const t = { options: opts, paused: false, stopRequested: false, resumeWaiters: [] };
  const persist = opts.persist !== false;   // the widget opts out of IndexedDB unless asked
  let saveWarned = false;
  const save = async (why) => {
    if (!persist) return null;
    try { return await saveRun(why); } catch (e) {
      // Private browsing or a full disk: keep training, say once that progress is not kept.
      if (!saveWarned) emit("error", { type: "StorageError", message: "Progress could not be saved in this browser (" + (e.message || e) + "); training continues.", expected: true });
      saveWarned = true;
      return null;
    }
  };
  trainer = t;
  py("configure", { batch_size: opts.batchSize, lr: opts.learningRate, seed: opts.seed });
  emit("state", { training: true, paused: false });
  let reason = "finished";
  let divergence = null;
  let recent = [];   // (time, steps, seconds) over the last few seconds, for steps/s
  try {
    let status = py("status");
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
      const r = py("train_for", { budget_ms: opts.budgetMs });
      const now = performance.now();
      recent.push([now, r.losses.length, r.seconds]);
      while (recent.length > 1 && now - recent[0][0] > 3000) recent.shift();
      const steps = recent.reduce((a, w) => a + w[1], 0);
      const secs = recent.reduce((a, w) => a + w[2], 0);
      const first = r.step - r.losses.length + 1;
      r.losses.forEach((l, i) => history.losses.push([first + i, l]));
      emit("progress", {
        step: r.step, epoch: r.epoch, epochStep: r.epoch_step, stepsPerEpoch: r.steps_per_epoch,
        losses: r.losses, firstStep: first, stepsPerSecond: secs > 0 ? steps / secs : 0, epochs: opts.epochs,
      });
      // A diverged run is an outcome to show with the training, not an error banner.
      if (r.diverged) { reason = "diverged"; divergence = r.diverged; break; }
      if (r.epoch_end) {
        const ev = py("evaluate");
        const rec = { epoch: r.epoch, step: r.step, loss: ev.loss, metric: ev.metric, metricName: ev.metric_name, mae: ev.mae };
        history.epochs.push(rec);
        emit("epoch", rec);
        await save("epoch");
      }
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
    const s = pyCallProxy ? safeStatus() : {};
    emit("done", { reason, epoch: s.epoch, step: s.step, divergence });
  }
}

function safeStatus() { try { return py("status"); } catch (e) { return {}; } }

function errorInfo(e) {
  return { type: e.type || e.name || "Error", message: e.message || String(e), expected: !!e.expected };
}

// ------------------------------------------------------------------ commands

function needIdle(what) {
  if (trainer) throw new UserError(`stop training before ${what}`, "Busy");
  if (federation) throw new UserError(`leave the federation before ${what}`, "Busy");
}

function startNewRun() {
  history = { losses: [], epochs: [] };
  savedVersions = { data: -1, artifacts: -1 };
}

const commands = {
  // Answered before Pyodide is ready: they only touch IndexedDB.
  async savedRun() {
    const { meta } = await dbGet(["meta"]);
    return summarizeMeta(meta);
  },
  async clearSaved() { await dbPut({}, true); return true; },
  async config() { return config; },

  // Everything below waits for pytrain.
  async status() { await ready; return py("status"); },

  async useDigits({ nTrain = 8000, nVal = 1000 } = {}) {
    await ready; needIdle("changing the data");
    const blob = await getDigits();
    startNewRun();
    return py("use_digits", { blob, n_train: nTrain, n_val: nVal });
  },
  async inspectCSV({ text }) { await ready; return py("inspect_csv", { text }); },
  async useCSV({ text, label, task = null, valFraction = 0.2, seed = 0, exclude = [], missing = "error", onehot = false }) {
    await ready; needIdle("changing the data");
    startNewRun();
    return py("use_csv", { text, label, task, val_fraction: valFraction, seed, exclude, missing, onehot });
  },
  async useArrays({ x, shape, y, task = "classification", classes = null, valFraction = 0.2, seed = 0 }) {
    await ready; needIdle("changing the data");
    startNewRun();
    return py("use_arrays", { x: { $array: x, shape }, y: { $array: y }, task, classes, val_fraction: valFraction, seed });
  },
  async useImages({ files, valFraction = 0.2, seed = 0 }) {
    await ready; needIdle("changing the data");
    const status = py("status");
    if (!status.model.ready) throw new UserError("build or upload the model first: images are resized to its input shape", "NotReady");
    const shape = imageShapeFor(status.model.sample_shape);
    if (!files || files.length < 2) throw new UserError("choose at least two labelled images", "DataError");
    const { x, labels } = await decodeImages(files, shape);
    const classes = Array.from(new Set(labels)).sort();
    const y = new Int32Array(labels.map((l) => classes.indexOf(l)));
    startNewRun();
    const summary = py("use_arrays", { x: { $array: x, shape: [files.length].concat(shape) }, y: { $array: y },
                                       task: "classification", classes, val_fraction: valFraction, seed });
    return summary;
  },
  async addSamples({ x, shape, y }) {
    await ready;
    return py("add_samples", { x: { $array: x, shape }, y: Array.from(y) });
  },
  async inspectModel({ bytes, name, extraFiles = null }) {
    await ready;
    return py("inspect_model", { blob: bytes, name, extra_files: extraFiles });
  },
  async buildDigits({ kind = "mlp", optimizer = "AdamW" } = {}) {
    await ready; needIdle("changing the model");
    const prebuilt = optimizer === "AdamW" ? await prebuiltArtifacts(kind) : null;
    startNewRun();
    return py("build_digits", { kind, optimizer, prebuilt });
  },
  async buildMLP({ hidden = [64], activation = "relu", optimizer = "AdamW", standardize = true, seed = 0 } = {}) {
    await ready; needIdle("changing the model");
    startNewRun();
    return py("build_mlp", { hidden, activation, optimizer, standardize, seed });
  },
  async generate({ bytes, loss, optimizer, requiresGrad = null, output = null, name, batchnorm = "auto", extraFiles = null }) {
    await ready; needIdle("changing the model");
    startNewRun();
    return py("generate", { blob: bytes, loss, optimizer, requires_grad: requiresGrad, output, name, batchnorm,
                            extra_files: extraFiles });
  },
  async useArtifacts({ training, eval: evalModel, optimizer, checkpoint, output = null }) {
    await ready; needIdle("changing the model");
    startNewRun();
    return py("use_artifacts", { training, eval: evalModel, optimizer, checkpoint, output });
  },
  /* Artifacts or a run file (.zip), recognised by content; {files: [{name, data}]}. A digits run
   * file brings back its digits from the site. */
  async useArtifactFiles({ files }) {
    await ready; needIdle("changing the model");
    startNewRun();
    const byName = {};
    for (const f of files) byName[f.name] = f.data instanceof Uint8Array ? f.data : new Uint8Array(f.data);
    const res = py("use_artifact_files", { files: byName });
    const src = res.data_source || {};
    if (src.kind === "digits") res.data = py("use_digits", { blob: await getDigits(), n_train: src.n_train, n_val: src.n_val });
    return res;
  },
  async changeOptimizer({ optimizer }) { await ready; needIdle("changing the optimizer"); return py("change_optimizer", { optimizer }); },
  async setScaling({ features = false, targets = null } = {}) { await ready; return py("set_scaling", { features, targets }); },
  /* backbone: {bytes, name, extraFiles, size, normalize}, a pretrained feature extractor (only a head trains);
   * with `info`, the bytes are the extractor a restored run came back with, used as they are */
  async buildCNN({ optimizer = "AdamW", backbone = null } = {}) {
    await ready; needIdle("changing the model");
    startNewRun();
    const bb = backbone && { bytes: backbone.bytes, name: backbone.name, extra_files: backbone.extraFiles || null,
                             size: backbone.size || null, normalize: backbone.normalize || "unit",
                             info: backbone.info || null };
    return py("build_cnn", { optimizer, backbone: bb });
  },
  async inspectBackbone({ bytes, name, extraFiles = null, size = null, normalize = "unit" }) {
    await ready;
    return py("inspect_backbone", { blob: bytes, name, extra_files: extraFiles, size, normalize });
  },
  /* The samples of a run on examples, for the "By example" gallery after a resume or a run file. */
  async examples() { await ready; return py("examples"); },
  async insights() { await ready; return py("insights"); },
  async runFile({ epochs } = {}) { await ready; return py("run_file", { epochs }); },
  async train(options = {}) {
    await ready;
    if (trainer) throw new UserError("training is already running", "Busy");
    needIdle("training on your own");
    trainLoop(options);   // reports through events; the reply only says it started
    return { started: true };
  },
  async pause() { if (trainer) trainer.paused = true; return !!trainer; },
  async resume() {
    if (!trainer) return false;
    trainer.paused = false;
    trainer.resumeWaiters.splice(0).forEach((r) => r());
    return true;
  },
  async stop() {
    if (!trainer) return false;
    trainer.stopRequested = true;
    trainer.paused = false;
    trainer.resumeWaiters.splice(0).forEach((r) => r());
    return true;
  },
  async configure({ batchSize, learningRate } = {}) {
    await ready;
    if (trainer) Object.assign(trainer.options, batchSize ? { batchSize } : {}, learningRate ? { learningRate } : {});
    return py("configure", { batch_size: batchSize, lr: learningRate });
  },
  async evaluate() { await ready; return py("evaluate"); },
  async restoreGood() {   // back to the last good checkpoint after a divergence; the plots' history too
    await ready; needIdle("going back");
    const res = py("restore_good");
    history = { losses: history.losses.filter((p) => p[0] <= res.step),
                epochs: history.epochs.filter((e) => e.step <= res.step) };
    res.history = history;
    return res;
  },
  async predict({ x, shape }) { await ready; return py("predict", { x: { $array: x, shape } }); },
  async checkpoint() { await ready; return py("checkpoint"); },
  async exportModel() { await ready; return py("export"); },
  async digest() { await ready; return py("digest"); },
  async save() { await ready; return saveRun("manual"); },
  async resumeSaved() {
    await ready; needIdle("resuming");
    const stored = await dbGet(["meta", "checkpoint", "artifacts", "data"]);
    if (!stored.meta || !stored.checkpoint || !stored.artifacts) throw new UserError("there is no saved run to resume", "NotFound");
    const meta = stored.meta;
    const digits = meta.data_source && meta.data_source.kind === "digits" ? await getDigits() : null;
    const res = py("restore", { meta, artifacts: stored.artifacts, checkpoint: stored.checkpoint,
                                data: stored.data || new Uint8Array(0), digits });
    history = meta.history || { losses: [], epochs: [] };
    // The restored run is the saved one: later saves keep its stored data/artifacts.
    const s = py("status");
    savedVersions = { data: s.data_version, artifacts: s.artifacts_version };
    res.history = history;
    res.train = meta.train;
    res.savedDigest = meta.digest;
    res.savedStep = meta.step;
    return res;
  },
};

/* onnxruntime-web's TrainingSession (pytrain-ort.js): each command is one operation of
 * pytrain.webapp.training_session on the session id that ortCreate returned. */
const ORT_COMMANDS = {
  ortCreate: "create", ortTrainStep: "train_step", ortEvalStep: "eval_step", ortOptimizerStep: "optimizer_step",
  ortLazyResetGrad: "lazy_reset_grad", ortParametersSize: "parameters_size",
  ortGetParameters: "contiguous_parameters", ortLoadParameters: "load_parameters", ortRelease: "release",
};
for (const [cmd, op] of Object.entries(ORT_COMMANDS)) {
  commands[cmd] = async (args) => { await ready; return py("ort", Object.assign({ op }, args)); };
}

// ------------------------------------------------------------------ "Join a federation" (Flower)

/* The node's protocol runs in Python, one step at a time (pytrain/flower/steps.py): this loop
 * only signs each request (WebCrypto, P-256 ECDSA-SHA256), sends it through the page's own origin
 * (build.py serve --flower proxies /flower/ to the SuperLink) and hands the answer back. The key
 * (non-extractable) and the node id stay in IndexedDB, so a reloaded tab rejoins as the same node. */
let federation = null;      // {stop, wake, done: Promise} while this tab is in a federation
const FL_DB = "pytrain-flower";

function flStore(mode, fn) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(FL_DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore("node");
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction("node", mode);
      const req = fn(tx.objectStore("node"));
      tx.oncomplete = () => { open.result.close(); resolve(req.result); };
      tx.onerror = () => { open.result.close(); reject(tx.error); };
    };
  });
}
const flGet = (key) => flStore("readonly", (s) => s.get(key));
const flPut = (key, value) => flStore("readwrite", (s) => value === null ? s.delete(key) : s.put(value, key));

function b64(bytes) { let t = ""; for (const b of bytes) t += String.fromCharCode(b); return btoa(t); }

async function federationKey() {
  let key = null;
  try { key = await flGet("key"); } catch (e) { console.warn("pytrain: no IndexedDB for the node key:", e); }
  if (key && key.privateKey && key.pem) return key;
  const pair = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign", "verify"]);
  const spki = b64(new Uint8Array(await crypto.subtle.exportKey("spki", pair.publicKey)));
  const pem = "-----BEGIN PUBLIC KEY-----\n" + spki.match(/.{1,64}/g).join("\n") + "\n-----END PUBLIC KEY-----\n";
  key = { privateKey: pair.privateKey, pem };
  try { await flPut("key", key); } catch (e) { /* this tab's node is new on every visit */ }
  return key;
}

/* WebCrypto signs ECDSA as raw r||s; the SuperLink wants DER: SEQUENCE { INTEGER r, INTEGER s }. */
function derSignature(raw) {
  const int = (b) => {
    let i = 0;
    while (i < b.length - 1 && b[i] === 0) i++;
    b = b.slice(i);
    return b[0] & 0x80 ? [0x02, b.length + 1, 0, ...b] : [0x02, b.length, ...b];
  };
  const half = raw.length / 2;
  const body = int(raw.slice(0, half)).concat(int(raw.slice(half)));
  return new Uint8Array([0x30, body.length, ...body]);
}

async function signedHeaders(key) {
  const ts = new Date().toISOString().replace("Z", "+00:00");
  const raw = new Uint8Array(await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, key.privateKey,
                                                     new TextEncoder().encode(ts)));
  return { "Content-Type": "application/protobuf", Accept: "application/protobuf",
           "flwr-public-key": btoa(key.pem), "flwr-timestamp": ts, "flwr-signature": b64(derSignature(raw)) };
}

async function federationLoop(f, key, url) {
  let answer = {};
  try {
    for (;;) {
      if (f.stop && !f.stopSent) { py("federation", { op: "stop" }); f.stopSent = true; }
      const step = py("federation", Object.assign({ op: "next" }, answer));
      answer = {};
      for (const ev of step.events) {
        if (ev.kind === "joined") await flPut("node:" + url, ev.node_id).catch(() => {});
        if (ev.kind === "left") await flPut("node:" + url, null).catch(() => {});
        // the federated model is this tab's run: kept like an epoch's, so a reload can resume and rejoin
        if (ev.kind === "answered" && ev.message_type === "train") await saveRun("federation").catch(() => {});
        emit("federation", ev);
      }
      if (step.kind === "done" || step.kind === "failed") {
        emit("federation", { kind: step.kind, error: step.error || null, answered: step.answered });
        return;
      }
      if (step.kind === "sleep") {
        if (step.seconds > 0 && !f.stop) await new Promise((r) => { f.wake = r; setTimeout(r, step.seconds * 1000); });
        else await yieldToEvents();
        continue;
      }
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), step.timeout * 1000);
      try {
        const resp = await fetch(url + "/v1/fleet/" + step.route, { method: "POST", body: step.body, cache: "no-store",
                                                                   headers: await signedHeaders(key), signal: abort.signal });
        answer = { status: resp.status, body: new Uint8Array(await resp.arrayBuffer()) };
      } catch (e) {
        answer = { error: e.name === "AbortError" ? `no answer within ${step.timeout} s` : (e.message || String(e)) };
      } finally { clearTimeout(timer); }
    }
  } catch (e) {
    emit("federation", { kind: "failed", error: e.message || String(e) });
  } finally {
    federation = null;
  }
}

Object.assign(commands, {
  /* Join the Flower federation at url (default: the site's /flower/) with this tab's model and data. */
  async federate({ url = "flower/", heartbeat = 30, poll = 1 } = {}) {
    await ready; needIdle("joining a federation");
    const base = new URL(url, BASE).href.replace(/\/+$/, "");
    if (new URL(base).origin !== self.location.origin) {
      throw new UserError("the federation must be served by this site (python build.py serve --flower URL): " +
                          "the page may only talk to its own origin", "FederationError");
    }
    const key = await federationKey();
    const nodeId = await flGet("node:" + base).catch(() => null);
    const info = py("federation", { op: "start", url: base, public_key: key.pem, node_id: nodeId || null, heartbeat, poll });
    const f = { stop: false, stopSent: false, wake: null };
    federation = f;
    f.done = federationLoop(f, key, base);
    emit("federation", Object.assign({ kind: "started", url: base }, info));
    return info;
  },
  /* Leave: the node deactivates and unregisters; resolves once it has. */
  async leaveFederation() {
    const f = federation;
    if (!f) return false;
    f.stop = true;
    if (f.wake) f.wake();
    await f.done;
    return true;
  },
});

self.onmessage = async (e) => {
  const { id, cmd, args } = e.data || {};
  const fn = commands[cmd];
  if (!fn) { post({ id, ok: false, error: { type: "UnknownCommand", message: `unknown command ${cmd}` } }); return; }
  try {
    const result = await fn(args || {});
    const transfer = [];
    collectTransfers(result, transfer);
    post({ id, ok: true, result }, transfer);
  } catch (err) {
    if (!err.expected) console.error(err);
    post({ id, ok: false, error: errorInfo(err) });
  }
};

function collectTransfers(value, out) {
  if (value instanceof Uint8Array && value.byteOffset === 0 && value.byteLength === value.buffer.byteLength
      && value.buffer !== (digitsBlob && digitsBlob.buffer)) out.push(value.buffer);
  else if (Array.isArray(value)) value.forEach((v) => collectTransfers(v, out));
  else if (value && typeof value === "object" && !ArrayBuffer.isView(value)) Object.values(value).forEach((v) => collectTransfers(v, out));
}

ready = loadRuntime().catch((e) => {
  console.error(e);
  emit("fatal", { type: "LoadError", message: "Could not start Python in this tab: " + (e.message || e) });
  throw new UserError("Python failed to load: " + (e.message || e), "LoadError");
});
ready.catch(() => {});
