// pytrain widget: train an ONNX model inside any web page (same origin as this file's site).
//
//   import { createTrainer } from "./pytrain-widget.js";
//   const trainer = createTrainer({ container, data: { csv: "iris.csv", label: "species" }, epochs: 20 });
//   trainer.on("epoch", (e) => console.log(e.metric));
//   await trainer.train();
//   const onnxBytes = await trainer.exportModel();
//
// or, without code:
//   <pytrain-trainer data="iris.csv" label="species" hidden-layers="16" epochs="20"></pytrain-trainer>
// attributes: data ("digits" or a CSV URL), label, task, artifacts, model, loss, optimizer, epochs,
// batch-size, learning-rate, hidden-layers, heading, autostart, persist, gpu ("on", "off"; absent: auto)
//
// Python runs in a Web Worker (worker.js next to this file): the host page never freezes and no
// data leaves the browser.

import { RUN_EVENTS, WorkerClient, registerServiceWorker } from "./js/client.js";
import { LinePlot } from "./js/plot.js";
import { ARTIFACT_FILES } from "./js/layout.js";


// Pyodide's files a first visit downloads first (site-relative; the build fills the list, as it writes
// index.html's preloads): a trainer asks for them at once, while the service worker and the Web Worker
// start, so the worker finds them in the HTTP cache; a later visit's service worker has them already.
const WARM_FILES = [/* WARM_FILES */];
let warmed = false;

function warmFirstVisit() {
  if (warmed || typeof document === "undefined" || (navigator.serviceWorker && navigator.serviceWorker.controller)) return;
  warmed = true;
  for (const name of WARM_FILES) {
    const link = Object.assign(document.createElement("link"), { rel: "preload", as: "fetch", crossOrigin: "anonymous" });
    link.href = new URL(name, import.meta.url).href;
    document.head.appendChild(link);
  }
}

/* The worker's URL: a trainer of the site's digits with the default MLP has its worker download the digits'
 * first part and the MLP's artifacts while Python starts, as the app's worker does (worker/data.js). */
function workerURL(o) {
  if (o.workerURL) return o.workerURL;
  const digits = o.data === "digits" || !!(o.data && o.data.digits);
  const defaultModel = !o.model && !o.run && (!o.artifacts || o.artifacts === "digits-mlp");
  const url = new URL(digits && defaultModel ? "./worker.js?prefetch=digits" : "./worker.js", import.meta.url);
  if (o.gpu === true || o.gpu === false) url.searchParams.set("gpu", o.gpu ? "1" : "0");   // "auto": unset
  return url;
}

async function toBytes(src, what) {
  if (src instanceof Uint8Array) return src;
  if (src instanceof ArrayBuffer) return new Uint8Array(src);
  if (ArrayBuffer.isView(src)) return new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
  if (typeof src === "string" || src instanceof URL) {
    const resp = await fetch(new URL(src, document.baseURI));
    if (!resp.ok) throw new Error(`${what}: ${src} answered HTTP ${resp.status}`);
    return new Uint8Array(await resp.arrayBuffer());
  }
  if (src && typeof src.arrayBuffer === "function") return new Uint8Array(await src.arrayBuffer());   // File / Blob
  throw new Error(`${what}: expected a URL, an ArrayBuffer, a Uint8Array or a Blob`);
}

async function toText(src, what) {
  if (typeof src === "string" && src.includes("\n")) return src;   // the CSV text itself
  return new TextDecoder().decode(await toBytes(src, what));
}

/* A run's settings among a trainer's options (pytrain.webapp.run_options.TabRun's, in camelCase). */
function runSettings(o) {
  return { epochs: o.epochs, batchSize: o.batchSize, learningRate: o.learningRate, optimizer: o.optimizer,
           hidden: o.hidden, persist: o.persist };
}

/**
 * Create a trainer. Options:
 *  - data: "digits" | {csv: text|URL|Blob, label, task?, missing?: "error" | "drop" | "fill"} (text columns of
 *    up to 10 values are one-hot encoded, as on the page) | {x: Float32Array, shape: [N, ...], y: number[], task?, classes?}
 *  - artifacts: "digits-mlp" | "digits-cnn" | a folder URL ending in "/" | {training, eval, optimizer, checkpoint} (URLs or bytes)
 *  - model: an inference .onnx (URL or bytes) to generate artifacts from, with loss, optimizer, requiresGrad, and
 *    lora ({rank, alpha?, targets?}: adapters beside the attention's weights train instead)
 *  - data {text: text|URL|Blob, tokenizer: tokenizer.json, blockSize?} or {textCsv, tokenizer, textColumn?, labelColumn?}
 *    with `model` a language or classification .onnx: "Your text", LoRA rank 8 by default (lora: null trains every weight)
 *  - run: a run file (.zip from the page's "Download the whole run" or runFile(), URL or bytes) to take
 *    back: model, checkpoint and progress, and its table when it holds one (then `data` is optional)
 *  - neither: digits get the digits MLP; tables get an MLP with `hidden` sizes (default [32])
 *  - epochs, batchSize, learningRate, optimizer ("AdamW" | "Adam" | "SGD"), valFraction (unset: 5, 32, 0.005,
 *    "AdamW", 0.2: Python's defaults, pytrain.webapp.run_options.TabRun; runOptions() says what a trainer runs with)
 *  - container: an element to render a small UI into (optional); autoStart: train once ready
 *  - persist: save a resumable run in IndexedDB after each epoch (default false)
 *  - gpu: "auto" (default: a hardware WebGPU adapter trains when there is one), true (any adapter, a software one
 *    such as SwiftShader too) or false (the CPU); `trainer.device` says what trains ({device, mode, reason}) and
 *    setGPU(gpu) switches between runs
 * Returns a trainer with train(), pause(), resume(), stop(), evaluate(), predict(), exportModel(),
 * checkpoint(), federate({url, heartbeat, localDp, requireClipping}), leaveFederation(), on(event, fn), destroy() and `ready`;
 * for text, also samples({prompt, newTokens, topK, seed, count}), logits(ids, mask), exportAdapters(format) and
 * exportTransformersJs() (the zip of the folder transformers.js loads).
 * Events: loading, ready, progress, epoch, done, error, federation, device (what trains changed: a fallback's reason).
 */
export function createTrainer(options = {}) {
  return new Trainer(options);
}

export class Trainer extends EventTarget {
  constructor(options) {
    super();
    this.options = Object.assign({}, options);
    // Only what the user set travels; unset means Python's default: epochs, batchSize, learningRate, optimizer,
    // hidden, persist pytrain.webapp.run_options.TabRun's (runOptions() answers them resolved), valFraction
    // data_source.VAL_FRACTION for a table, blockSize and lora text_source.TextUse's for text
    // sw.js (same origin only) caches the runtime for the next visit; see js/client.js.
    warmFirstVisit();
    const startAfter = registerServiceWorker();
    this.client = new WorkerClient({ workerURL: workerURL(this.options), startAfter });
    this.data = null;
    this.model = null;
    this.lastEpoch = null;
    this._done = null;
    for (const type of RUN_EVENTS) this.client.on(type, (detail) => this._emit(type, detail));
    this.device = null;   // {device: "GPU: <adapter>" | "CPU, N threads", mode, reason: why not the GPU}
    this.client.on("ready", (v) => { this.device = v.gpu || null; });
    this.client.on("device", (d) => { this.device = d; });
    this.client.on("fatal", (detail) => this._emit("error", detail));
    this.client.on("done", (detail) => { if (this._done) { this._done(detail); this._done = null; } });
    this.ready = this._prepare();   // async: its first await lets the UI below subscribe in time
    this.ready.catch((e) => this._emit("error", { type: e.type || "Error", message: e.message }));
    if (this.options.container) this.ui = new TrainerUI(this.options.container, this, this.options.title);
    if (this.options.autoStart) this.ready.then(() => this.train()).catch(() => {});
  }

  /** Listen to an event; the handler gets the event data. Returns an unsubscribe function. */
  on(type, handler) {
    const fn = (e) => handler(e.detail);
    this.addEventListener(type, fn);
    return () => this.removeEventListener(type, fn);
  }

  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }

  async _prepare() {
    const o = this.options;
    await this.client.ready;
    if (o.run) {   // a run file: artifacts and progress (and its table) in one
      this._emit("status", { message: "Taking the run back…" });
      const res = await this.client.call("useArtifactFiles", { files: [{ name: "run.zip", data: await toBytes(o.run, "run") }] });
      this.data = res.data && res.data.loaded && !o.data ? res.data : await this._loadData(o.data);
      this.model = res.model;
      this._emit("status", { message: "Ready to train." });
      return { data: this.data, model: this.model };
    }
    if (o.data && (o.data.text !== undefined || o.data.textCsv !== undefined)) {   // "Your text": data and model in one
      this._emit("status", { message: "Reading the text and building the model…" });
      const res = await this._loadText(o.data);
      this.data = res.data;
      this.model = res.model;
      this.memory = res.memory;
      this._emit("status", { message: "Ready to train." });
      return { data: this.data, model: this.model };
    }
    this._emit("status", { message: "Loading data…" });
    this.data = await this._loadData(o.data);
    this._emit("status", { message: "Preparing the model…" });
    this.model = await this._loadModel();
    this._emit("status", { message: "Ready to train." });
    return { data: this.data, model: this.model };
  }

  async _loadData(data) {
    const o = this.options;
    if (!data) throw new Error("createTrainer needs `data`: \"digits\", {csv, label} or {x, shape, y}");
    if (data === "digits" || data.digits) {
      return this.client.call("useDigits", { nTrain: (data.digits && data.digits.nTrain) || 8000, nVal: 1000 });
    }
    if (data.csv !== undefined) {
      if (!data.label) throw new Error("data.label: name the CSV column to predict");
      const text = await toText(data.csv, "data.csv");
      return this.client.call("useCSV", { text, label: data.label, task: data.task || null, valFraction: o.valFraction,
                                          missing: data.missing || "error", onehot: true });
    }
    if (data.x !== undefined) {
      const x = data.x instanceof Float32Array ? data.x : new Float32Array(data.x);
      const y = data.task === "regression" ? new Float32Array(data.y) : new Int32Array(data.y);
      return this.client.call("useArrays", { x, shape: data.shape, y, task: data.task || "classification",
                                              classes: data.classes || null, valFraction: o.valFraction });
    }
    throw new Error("data: expected \"digits\", {csv, label} or {x, shape, y}");
  }

  /* An ONNX language or classification model (`model`: an .onnx, or a Hub folder's .zip with its config.json and
   * tokenizer files, `data.dtype` choosing its model as transformers.js does) with its tokenizer.json, fine-tuned on a
   * text file (a causal LM, next-token loss) or a CSV of texts and labels; LoRA rank 8, alpha 16 on the attention's
   * weights unless `lora` says. */
  async _loadText(data) {
    const o = this.options;
    if (!o.model) throw new Error("data.text / data.textCsv: give the language model as `model` (an .onnx)");
    const csv = data.textCsv !== undefined;
    const text = await toText(csv ? data.textCsv : data.text, csv ? "data.textCsv" : "data.text");
    // a Hub model's config.json: the heads and head size of the empty past a with-past model takes
    const extraFiles = data.config ? { "config.json": await toBytes(data.config, "data.config") } : null;
    return this.client.call("useText", {
      bytes: await toBytes(o.model, "model"), name: "model",
      tokenizer: data.tokenizer ? await toText(data.tokenizer, "data.tokenizer") : undefined, dtype: data.dtype,
      text: csv ? null : text, csv: csv ? text : null, blockSize: data.blockSize || undefined,
      lora: o.lora, optimizer: o.optimizer,
      textColumn: data.textColumn || null, labelColumn: data.labelColumn || null, valFraction: o.valFraction,
      extraFiles });
  }

  async _loadModel() {
    const o = this.options;
    const a = o.artifacts;
    if (a === "digits-mlp" || a === "digits-cnn" || (!a && !o.model && this.data.kind === "digits")) {
      return this.client.call("buildDigits", { kind: a === "digits-cnn" ? "cnn" : "mlp", optimizer: o.optimizer });
    }
    if (a) {
      const files = {};
      for (const [key, name] of Object.entries(ARTIFACT_FILES)) {
        const src = typeof a === "string" ? new URL(name, new URL(a, document.baseURI)).href : a[key];
        if (!src) throw new Error(`artifacts.${key} is missing`);
        files[key] = await toBytes(src, `artifacts.${key}`);
      }
      return this.client.call("useArtifacts", files);
    }
    if (o.model) {
      const bytes = await toBytes(o.model, "model");
      return this.client.call("generate", { bytes, loss: o.loss || (this.data.task === "regression" ? "MSELoss" : "CrossEntropyLoss"),
                                            optimizer: o.optimizer, requiresGrad: o.requiresGrad || null, name: "model",
                                            lora: o.lora || null });
    }
    return this.client.call("buildMLP", { hidden: o.hidden, optimizer: o.optimizer });
  }

  /** Train up to `epochs` epochs in total; resolves with {reason, epoch, step} when training ends. */
  async train(overrides = {}) {
    await this.ready;
    const o = Object.assign({}, this.options, overrides);
    const finished = new Promise((resolve) => { this._done = resolve; });
    await this.client.call("train", runSettings(o));
    return finished;
  }

  /** The training options this trainer runs with: those it was given, the rest Python's defaults. */
  async runOptions() { await this.client.ready; return this.client.call("runOptions", runSettings(this.options)); }

  /** Train on the GPU (true: any WebGPU adapter), the CPU (false) or "auto" (a hardware adapter) from the next
   * step on, while not training; resolves with what trains ({device, mode, reason}). */
  async setGPU(gpu) {
    await this.client.ready;
    this.device = await this.client.call("setDevice", { gpu: gpu === true ? "on" : gpu === false ? "off" : "auto" });
    return this.device;
  }

  pause() { return this.client.call("pause"); }
  resume() { return this.client.call("resume"); }
  stop() { return this.client.call("stop"); }
  /** Validation loss and accuracy (classification) or RMSE (regression). */
  async evaluate() { await this.ready; return this.client.call("evaluate"); }
  /** Outputs (and class probabilities) for samples x of shape [N, ...]; for a table, x may be one row
   * as typed, an array of strings (one per column, text as text, "" when missing): what the exported
   * model takes too (docs/web.md, "Exports of tables"). */
  async predict(x, shape) {
    await this.ready;
    if (Array.isArray(x) && x.some((v) => typeof v === "string")) return this.client.call("predict", { row: x });
    const arr = x instanceof Float32Array ? x : new Float32Array(x);
    return this.client.call("predict", { x: arr, shape: shape || [1, arr.length] });
  }
  /** The trained inference model as ONNX bytes (LoRA adapters merged into their weights). */
  async exportModel() { await this.ready; return this.client.call("exportModel"); }
  /** The LoRA adapters alone, as an ONNX file of initializers (format "onnx") or an .npz (format "npz"). */
  async exportAdapters(format = "onnx") { await this.ready; return this.client.call("exportAdapters", { format }); }
  /** A text model as the zip of the folder transformers.js loads as it is: config.json, the tokenizer files,
   * onnx/model.onnx and, for a quantized model, onnx/model_quantized.onnx requantized in its scheme. */
  async exportTransformersJs() { await this.ready; return this.client.call("exportTransformersJs"); }
  /** What a text model says from its current weights: a causal LM's continuation of `prompt` (greedy, or top-k
   * sampling with a seed), a classifier's predictions on `count` held-out texts. */
  async samples({ prompt = null, newTokens = 20, topK = 0, seed = 0, count = 4 } = {}) {
    await this.ready;
    return this.client.call("textSamples", { prompt, newTokens, topK, seed, count });
  }
  /** A text model's outputs for token ids (arrays of ids; `mask` a classifier's attention mask) through the
   * exported model: {logits: Float32Array, shape}. */
  async logits(ids, mask = null) {
    await this.ready;
    const rows = (a) => a && a.map((row) => Array.from(row));
    const r = await this.client.call("textLogits", { ids: rows(ids), mask: rows(mask) });
    return { logits: new Float32Array(r.logits.slice().buffer), shape: r.shape };
  }
  /** The current checkpoint (parameters + optimizer state) as bytes. */
  async checkpoint() { await this.ready; return this.client.call("checkpoint"); }
  /** The whole run (artifacts, checkpoint, table) as one zip, which `run:` and `pytrain train --resume` take back. */
  async runFile() {
    await this.ready;
    return this.client.call("runFile", { epochs: (await this.runOptions()).epochs });
  }

  /** Join the Flower federation this site serves (python build.py serve --flower URL) as a node with this
   * trainer's model and data; "federation" events report each round (see docs/web.md). */
  async federate({ url = "flower/", heartbeat = 30, localDp = null, requireClipping = false } = {}) {
    await this.ready;
    return this.client.call("federate", { url: new URL(url, document.baseURI).href, heartbeat, localDp, requireClipping });
  }
  leaveFederation() { return this.client.call("leaveFederation"); }
  destroy() { this.client.terminate(); if (this.ui) this.ui.remove(); }
}

// ------------------------------------------------------------------ a compact UI

const UI_CSS = `
:host { all: initial; display: block; max-width: 520px; font: 14px/1.4 system-ui, sans-serif; color: #1f2933; }
.box { border: 1px solid #dde1e6; border-radius: 10px; padding: 12px; background: #fff; }
.title { font-weight: 600; margin-bottom: 6px; }
.bar { height: 6px; background: #e6e9ee; border-radius: 3px; overflow: hidden; margin: 6px 0; }
.bar div { height: 100%; width: 0; background: #1f4e8c; transition: width .2s; }
.status { font-size: 13px; color: #374151; min-height: 1.3em; }
.error { color: #a52a1a; font-size: 13px; }
canvas { width: 100%; height: 140px; border: 1px solid #e3e6ea; border-radius: 6px; margin-top: 6px; }
.buttons { display: flex; gap: 6px; flex-wrap: wrap; margin-top: 8px; }
button { font: inherit; padding: 4px 10px; border-radius: 6px; border: 1px solid #b8c0ca; background: #f8f9fb; cursor: pointer; }
button.primary { background: #1f4e8c; color: #fff; border-color: #1f4e8c; }
button:disabled { opacity: .5; cursor: not-allowed; }
.note { font-size: 11px; color: #6b7280; margin-top: 6px; }
`;

class TrainerUI {
  constructor(container, trainer, title) {
    this.host = document.createElement("div");
    this.host.className = "pytrain-widget";
    container.appendChild(this.host);
    const root = this.host.attachShadow({ mode: "open" });
    root.innerHTML = `<style>${UI_CSS}</style><div class="box">
      <div class="title"></div>
      <div class="bar"><div></div></div>
      <div class="status">Loading Python…</div>
      <div class="error" hidden></div>
      <canvas></canvas>
      <div class="buttons">
        <button class="primary" data-act="train" disabled>Train</button>
        <button data-act="pause" disabled>Pause</button>
        <button data-act="stop" disabled>Stop</button>
        <button data-act="export" disabled>Download model</button>
      </div>
      <div class="note">Trains in this browser tab<span class="device"></span>; no data leaves it.</div></div>`;
    this.root = root;
    root.querySelector(".title").textContent = title || "pytrain";
    const q = (s) => root.querySelector(s);
    this.bar = q(".bar div");
    this.status = q(".status");
    this.errorBox = q(".error");
    this.plot = new LinePlot(q("canvas"), { title: "loss", xLabel: "step" });
    this.loss = { color: "#1f4e8c", points: [] };
    this.plot.setSeries([this.loss]);
    this.buttons = Object.fromEntries(Array.from(root.querySelectorAll("button")).map((b) => [b.dataset.act, b]));
    const run = (fn) => async () => {
      try { this.errorBox.hidden = true; await fn(); } catch (e) { this.showError(e); }
    };
    this.buttons.train.onclick = run(() => trainer.train());
    this.buttons.pause.onclick = run(async () => {
      const paused = this.buttons.pause.textContent === "Resume";
      await (paused ? trainer.resume() : trainer.pause());
    });
    this.buttons.stop.onclick = run(() => trainer.stop());
    this.buttons.export.onclick = run(async () => {
      const bytes = await trainer.exportModel();
      const a = document.createElement("a");
      a.href = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
      a.download = "pytrain-model.onnx";
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
    });
    trainer.on("loading", (p) => { this.bar.style.width = `${Math.round(100 * p.fraction)}%`; this.status.textContent = `${p.stage}…`; });
    trainer.on("status", (s) => { this.status.textContent = s.message; });
    trainer.ready.then(() => { this.bar.style.width = "0%"; this.buttons.train.disabled = false; this.buttons.export.disabled = false; },
      () => { this.bar.parentElement.hidden = true; this.status.hidden = true; });   // a failed load: only its error shows
    trainer.on("progress", (p) => {
      p.losses.forEach((l, i) => this.loss.points.push([p.firstStep + i, l]));
      this.plot.draw();
      this.bar.style.width = `${Math.round((100 * p.epochStep) / Math.max(1, p.stepsPerEpoch))}%`;
      const last = trainer.lastEpoch;
      this.status.textContent = `epoch ${Math.min(p.epoch + 1, p.epochs)}/${p.epochs} · step ${p.step} · ${p.stepsPerSecond.toFixed(1)} steps/s` +
        (last && last.metric !== null ? ` · val ${last.metricName} ${last.metricName === "accuracy" ? (100 * last.metric).toFixed(1) + "%" : last.metric.toPrecision(4)}` : "");
    });
    trainer.on("epoch", (e) => { trainer.lastEpoch = e; });
    trainer.on("state", (s) => {
      this.buttons.train.disabled = s.training;
      this.buttons.pause.disabled = !s.training;
      this.buttons.stop.disabled = !s.training;
      this.buttons.pause.textContent = s.paused ? "Resume" : "Pause";
    });
    trainer.on("done", (d) => {
      const last = trainer.lastEpoch;
      this.status.textContent = `${d.reason === "finished" ? "Done" : "Stopped"}: epoch ${d.epoch}, step ${d.step}` +
        (last && last.metric !== null ? ` · val ${last.metricName} ${last.metricName === "accuracy" ? (100 * last.metric).toFixed(1) + "%" : last.metric.toPrecision(4)}` : "");
    });
    trainer.on("error", (e) => this.showError(e));
    const device = (d) => { if (d) root.querySelector(".device").textContent = " on " + d.device + (d.reason ? " (" + d.reason + ")" : ""); };
    trainer.on("ready", (v) => device(v.gpu));
    trainer.on("device", device);
  }

  showError(e) {
    this.errorBox.hidden = false;
    this.errorBox.textContent = e.message || String(e);
  }

  remove() { this.host.remove(); }
}

// ------------------------------------------------------------------ <pytrain-trainer> for no-code embedding

const NUM = (v) => (v === null || v === "" ? undefined : Number(v));

export class PytrainTrainerElement extends HTMLElement {
  connectedCallback() {
    if (!this.style.display) this.style.display = "block";
    if (this.trainer) return;
    const attr = (n) => this.getAttribute(n);
    const dataAttr = attr("data") || "digits";
    const data = dataAttr === "digits" ? "digits" : { csv: dataAttr, label: attr("label"), task: attr("task") || undefined };
    const options = {
      container: this, data, title: attr("heading") || "pytrain",
      artifacts: attr("artifacts") || undefined, model: attr("model") || undefined,
      epochs: NUM(attr("epochs")), batchSize: NUM(attr("batch-size")), learningRate: NUM(attr("learning-rate")),
      optimizer: attr("optimizer") || undefined, loss: attr("loss") || undefined,
      hidden: attr("hidden-layers") ? attr("hidden-layers").split(",").map(Number) : undefined,
      autoStart: this.hasAttribute("autostart"), persist: this.hasAttribute("persist"),
      gpu: { on: true, off: false }[attr("gpu")],
    };
    for (const k of Object.keys(options)) if (options[k] === undefined) delete options[k];
    this.trainer = createTrainer(options);
    // Re-dispatch as DOM events so no-code hosts can listen on the element itself.
    for (const type of ["ready", "progress", "epoch", "done", "error"]) {
      this.trainer.on(type, (detail) => this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true })));
    }
    this.trainer.ready.then(() => this.dispatchEvent(new CustomEvent("prepared", { detail: this.trainer.model, bubbles: true })), () => {});
  }

  disconnectedCallback() {
    if (this.trainer) { this.trainer.destroy(); this.trainer = null; }
  }

  train(o) { return this.trainer.train(o); }
  pause() { return this.trainer.pause(); }
  stop() { return this.trainer.stop(); }
  evaluate() { return this.trainer.evaluate(); }
  exportModel() { return this.trainer.exportModel(); }
}

if (!customElements.get("pytrain-trainer")) customElements.define("pytrain-trainer", PytrainTrainerElement);
