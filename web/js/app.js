// The pytrain page: wires the UI to the worker. All Python runs in the worker (../worker.js).

import { WorkerClient, registerServiceWorker } from "./client.js";
import { LinePlot } from "./plot.js";
import { DrawPad, paintDigit } from "./draw.js";
import { download, readFiles, readText } from "./files.js";
import { excludedColumns, renderColumns, separatorName } from "./columns.js";

const $ = (id) => document.getElementById(id);
// The service worker (../sw.js) caches the runtime so the next visit starts fast; on a first
// visit the Web Worker waits (briefly) for it so the downloads go through it and get cached.
const client = new WorkerClient({ startAfter: registerServiceWorker() });

// Shared state; also exposed as window.pytrainApp for the browser tests and for curious users.
const app = {
  client,
  ready: false,
  data: null,            // data summary from the worker
  model: null,           // model summary from the worker
  training: false,
  paused: false,
  step: 0,
  epoch: 0,
  rebuild: null,         // how to rebuild the current model with another optimizer (before step 1)
  lastPrediction: null,  // {input, probabilities, label}
  saved: null,           // last "saved" event
  epochs: [],            // per-epoch validation records
  resumed: null,         // result of the last resume
  onnxUpload: null,      // {name, bytes} of the uploaded inference model
  drawn: [],             // digits the user drew and added ({x, y}), kept when the digits model is rebuilt
  errors: [],
  history: { losses: [], epochs: [] },
  // ms since navigation start (performance.now()): Python ready, first training step reported
  timing: { ready: null, firstStep: null },
};
window.pytrainApp = app;

// ------------------------------------------------------------------ errors and status

/**
 * Show an error where the action was: the one error box moves next to the control (inside its
 * fieldset, tab or card), scrolls into view and takes the focus. Without a control (e.g. Python
 * failed to load) it stays under the page header.
 */
function showError(err, near = null) {
  const msg = (err && err.message) || String(err);
  app.errors.push(msg);
  const box = $("error");
  const host = near && near.closest ? near.closest("fieldset, .tab, .card") : null;
  if (host) (near.closest(".draw, .row, label.file") || near).after(box);   // right under the control's row
  else document.querySelector("header.top").after(box);
  box.dataset.near = near && near.id ? near.id : "";
  $("error-text").textContent = msg;
  box.hidden = false;
  box.scrollIntoView({ block: "center" });
  box.focus({ preventScroll: true });
}
$("error-close").onclick = () => {
  $("error").hidden = true;
  const back = $($("error").dataset.near || "");
  if (back && !back.disabled) back.focus();
};

/** Run an async UI action; errors show next to `button` (or `near`) and re-enable the button. */
async function guarded(button, fn, near = null) {
  if (button) button.disabled = true;
  try { return await fn(); } catch (e) {
    // a half-done step must not leave its progress message behind ("Reading the table…")
    if ($("setup-status").textContent.endsWith("…")) describeSetup();
    showError(e, near || button);
    return undefined;
  } finally {
    if (button) button.disabled = false;
    refreshButtons();
  }
}

// Buttons that disable themselves (Build, Start…) would drop the focus to the page body: keep it
// on the next control of the same group, or on the section's status line.
let lastFocus = null;
document.addEventListener("focusin", (e) => { lastFocus = e.target; });
function keepFocus() {
  const lost = lastFocus;
  if (!lost || !lost.disabled || (document.activeElement && document.activeElement !== document.body)) return;
  const group = lost.closest(".row, fieldset, .tab, .card");
  const next = group && Array.from(group.querySelectorAll("button, input, select"))
    .find((el) => !el.disabled && el.offsetParent !== null);
  const card = lost.closest(".card");
  const target = next || (card && card.querySelector(".status"));
  if (target) target.focus({ preventScroll: true });
}

function setStatus(id, text, ok = false, bad = false) {
  $(id).textContent = text;
  $(id).classList.toggle("ok", ok);
  $(id).classList.toggle("bad", bad);
}

const nf = new Intl.NumberFormat();

function describeSetup() {
  const parts = [];
  const d = app.data;
  if (d && d.loaded) {
    const what = d.kind === "digits" ? "digits" : d.kind === "csv" ? "rows" : "samples";
    parts.push(`Data: ${nf.format(d.train)} training / ${nf.format(d.val)} validation ${what}` +
      (d.task === "classification" ? `, ${d.num_classes} classes` : ", regression") +
      (d.added ? ` (${d.added} added by you)` : "") + ".");
    if (d.notes && d.notes.length) parts.push(`Table: ${d.notes.join("; ")}.`);
    if (d.task_reason) parts.push(`Task: ${d.task}, because ${d.task_reason} (set "Task" to change it).`);
  } else parts.push("No data yet.");
  const m = app.model;
  if (m && m.ready) {
    const name = m.origin === "digits" ? `digits ${m.kind.toUpperCase()}` : m.origin === "mlp" ? `MLP (${m.hidden.join("-")})`
      : m.origin === "upload" ? "your model" : "your artifacts";
    const sc = m.scaling || {};
    const scaled = [sc.x_mean ? "features standardised" : "", sc.y_mean ? "targets scaled to mean 0, std 1" : ""].filter(Boolean);
    parts.push(`Model: ${name}, ${nf.format(m.params)} trainable parameters, ${m.loss}, ${m.optimizer}` +
      (scaled.length ? ` (${scaled.join(", ")}; undone in the exported model).` : "."));
  } else parts.push("No model yet.");
  setStatus("setup-status", parts.join(" "), !!(d && d.loaded && m && m.ready));
}

function refreshButtons() {
  const ready = app.ready;
  const haveModel = !!(app.model && app.model.ready);
  const haveData = !!(app.data && app.data.loaded);
  $("digits-build").disabled = !ready || app.training;
  $("csv-build").disabled = !ready || app.training || !$("csv-label").value;
  $("onnx-generate").disabled = !ready || app.training || !app.onnxUpload;
  $("artifacts-use").disabled = !ready || app.training || !($("artifact-files").files || []).length;
  $("data-csv-load").disabled = !ready || app.training || !$("data-csv-label").value;
  $("data-images-load").disabled = !ready || app.training || !(($("data-images").files || []).length || ($("data-folder").files || []).length);
  $("start").disabled = !ready || app.training || !haveModel || !haveData;
  $("start").textContent = app.step > 0 && !app.training ? "Continue" : "Start";
  $("pause").disabled = !app.training || app.paused;
  $("resume-train").disabled = !app.training || !app.paused;
  $("stop").disabled = !app.training;
  $("optimizer").disabled = app.training;
  $("download-checkpoint").disabled = !ready || !haveModel;
  $("download-run").disabled = !ready || !haveModel || app.training;
  $("download-model").disabled = !ready || !haveModel;
  $("add-sample").disabled = !ready || !haveData || !app.lastPrediction || !app.lastPrediction.input || !(app.data && app.data.kind === "digits");
  $("row-predict").disabled = !ready || !haveModel;
  $("resume-btn").disabled = !ready || app.training;
  keepFocus();
}

// ------------------------------------------------------------------ loading

client.on("loading", ({ stage, fraction }) => {
  $("load-bar").style.width = `${Math.round(fraction * 100)}%`;
  $("load-progress").setAttribute("aria-valuenow", String(Math.round(fraction * 100)));
  $("load-text").textContent = `${stage}… ${Math.round(fraction * 100)}%`;
});
client.on("startup", (marks) => { app.timing.startup = marks; });
client.on("ready", (v) => {
  app.timing.ready = performance.now();
  app.ready = true;
  app.versions = v;
  $("load-bar").style.width = "100%";
  $("loader").classList.add("done");
  $("load-text").textContent = "Python is ready.";
  $("versions").textContent = `pytrain ${v.pytrain} · Python ${v.python} · numpy ${v.numpy} · Pyodide ${v.pyodide} · products: ${v.gemm}`;
  document.body.dataset.ready = "1";
  setStatus("setup-status", "Choose data and a model.");
  describeSetup();
  refreshButtons();
});
client.on("fatal", (e) => { $("load-text").textContent = "Python could not start."; showError(e); });
client.on("error", (e) => showError(e, $("train-status")));

// ------------------------------------------------------------------ tabs

for (const btn of document.querySelectorAll(".tabs button")) {
  btn.onclick = () => {
    for (const b of document.querySelectorAll(".tabs button")) {
      b.setAttribute("aria-selected", String(b === btn));
      $(`tab-${b.dataset.tab}`).hidden = b !== btn;
    }
  };
}

// ------------------------------------------------------------------ plots

const lossPlot = new LinePlot($("loss-plot"), { title: "Training loss", xLabel: "step" });
const metricPlot = new LinePlot($("metric-plot"), { title: "Validation", xLabel: "epoch", integerX: true, xRange: [0, 1] });
const lossSeries = { label: "batch", color: "#b7c7de", points: [], width: 1 };
const emaSeries = { label: "smoothed", color: "#1f4e8c", points: [], width: 2 };
const valLossSeries = { label: "validation", color: "#d9822b", points: [], markers: true };
lossPlot.setSeries([lossSeries, emaSeries, valLossSeries]);
const metricSeries = { label: "accuracy", color: "#1b7f3b", points: [], markers: true };
metricPlot.setSeries([metricSeries]);
let ema = null;
let lossRange = [Infinity, 0];
app.lossPoints = () => lossSeries.points.slice();
app.lossPlotLog = () => lossPlot.logY;

function resetPlots() {
  lossSeries.points = []; emaSeries.points = []; valLossSeries.points = []; metricSeries.points = [];
  ema = null;
  lossRange = [Infinity, 0];
  lossPlot.logY = false;
  app.epochs = [];
  lossPlot.draw(); metricPlot.draw();
}

function addLosses(firstStep, losses) {
  losses.forEach((l, i) => {
    const s = firstStep + i;
    lossSeries.points.push([s, l]);
    ema = ema === null ? l : ema + 0.05 * (l - ema);
    emaSeries.points.push([s, ema]);
    if (Number.isFinite(l) && l > 0) { lossRange[0] = Math.min(lossRange[0], l); lossRange[1] = Math.max(lossRange[1], l); }
  });
  // A loss that spans more than two decades (a divergence, or a long run) reads better on a log scale.
  lossPlot.logY = lossRange[1] / lossRange[0] > 100;
  lossPlot.draw();
}

function addEpoch(rec) {
  app.epochs.push(rec);
  if (rec.loss !== null && rec.loss !== undefined) valLossSeries.points.push([rec.step, rec.loss]);
  if (rec.metric !== null && rec.metric !== undefined) {
    metricSeries.label = rec.metricName === "accuracy" ? "accuracy" : rec.metricName;
    metricPlot.yRange = rec.metricName === "accuracy" ? [0, 1] : null;
    metricSeries.points.push([rec.epoch, rec.metric]);
  }
  lossPlot.draw(); metricPlot.draw();
}

function loadHistory(h) {
  resetPlots();
  if (!h) return;
  const pts = h.losses || [];
  if (pts.length) addLosses(pts[0][0], pts.map((p) => p[1]));
  for (const e of h.epochs || []) addEpoch(e);
}

function metricText(rec) {
  if (!rec || rec.metric === null || rec.metric === undefined) return "";
  return rec.metricName === "accuracy" ? `validation accuracy ${(100 * rec.metric).toFixed(1)}%`
    : `validation ${rec.metricName.toUpperCase()} ${rec.metric.toPrecision(4)}`;
}

// ------------------------------------------------------------------ training events

let lastProgress = null;
client.on("progress", (p) => {
  if (app.timing.firstStep === null) app.timing.firstStep = performance.now();
  lastProgress = p;
  app.step = p.step; app.epoch = p.epoch;
  addLosses(p.firstStep, p.losses);
  const frac = p.stepsPerEpoch ? p.epochStep / p.stepsPerEpoch : 0;
  $("epoch-bar").style.width = `${Math.round(100 * frac)}%`;
  const loss = p.losses.length ? p.losses[p.losses.length - 1] : NaN;
  const last = app.epochs[app.epochs.length - 1];
  setStatus("train-status", `Epoch ${Math.min(p.epoch + 1, p.epochs)} of ${p.epochs} · step ${nf.format(p.step)} · ` +
    `${p.stepsPerSecond.toFixed(1)} steps/s · loss ${loss.toFixed(4)}` + (last ? ` · ${metricText(last)}` : ""));
});
client.on("epoch", (rec) => {
  addEpoch(rec);
  if (!$("try-digits").hidden && !pad.empty) predictDrawing();
});
client.on("saved", (s) => {
  app.saved = s;
  setStatus("saved-status", `Saved in this browser after epoch ${s.epoch}, step ${nf.format(s.step)} ` +
    `(${new Date(s.savedAt).toLocaleTimeString()}). Reloading the page offers to resume from here.`);
});
client.on("state", (s) => {
  app.training = s.training; app.paused = s.paused;
  if (s.paused) setStatus("train-status", `Paused at step ${nf.format(app.step)}.`);
  refreshButtons();
});
client.on("done", (d) => {
  app.training = false; app.paused = false;
  if (d.step !== undefined) { app.step = d.step; app.epoch = d.epoch; }
  const last = app.epochs[app.epochs.length - 1];
  if (d.reason === "diverged") { showDivergence(d); refreshButtons(); return; }
  const what = d.reason === "finished" ? "Finished" : d.reason === "stopped" ? "Stopped" : "Stopped after an error";
  setStatus("train-status", `${what} at epoch ${d.epoch}, step ${nf.format(d.step || 0)}.` + (last ? ` ${metricText(last)}.` : ""), d.reason === "finished");
  if (d.reason !== "error") $("epoch-bar").style.width = "100%";
  refreshButtons();
});

/** A run whose loss became non-finite or exploded: say so, and offer the last good checkpoint. */
function showDivergence(d) {
  const div = d.divergence || {};
  const good = div.good || { epoch: 0, step: 0 };
  app.divergence = div;
  if (div.loss) addLosses(div.step, [div.loss]);   // the step that blew up (its update was not applied)
  setStatus("train-status", `Diverged at step ${nf.format(d.step || 0)}: the loss blew up, so training stopped. ` +
    "The model is not usable as it is.", false, true);
  const msg = (div.message || "the loss became too large").replace(/^training diverged/, "Training diverged");
  $("diverged-text").textContent = `${msg} The plot's scale is logarithmic so the jump stays readable.`;
  $("restore-good").textContent = good.step ? `Go back to epoch ${good.epoch} (step ${nf.format(good.step)})`
    : "Go back to the untrained model (step 0)";
  $("diverged").hidden = false;
  $("restore-good").focus();
}

$("restore-good").onclick = () => guarded($("restore-good"), async () => {
  const res = await client.call("restoreGood");
  app.step = res.step; app.epoch = res.epoch; app.divergence = null;
  app.model = res.model;
  loadHistory(res.history);
  $("diverged").hidden = true;
  setStatus("train-status", `Back at epoch ${res.epoch}, step ${nf.format(res.step)}, the last good checkpoint. ` +
    "Lower the learning rate, then press Continue.");
  $("lr").focus();
});

function trainOptions() {
  const epochs = parseInt($("epochs").value, 10);
  const batchSize = parseInt($("batch-size").value, 10);
  const learningRate = parseFloat($("lr").value);
  if (!(epochs >= 1)) throw new Error("Epochs must be a whole number of at least 1.");
  if (!(batchSize >= 1)) throw new Error("Batch size must be a whole number of at least 1.");
  if (!(learningRate > 0)) throw new Error("The learning rate must be a positive number.");
  return { epochs, batchSize, learningRate };
}

$("start").onclick = () => guarded(null, async () => {
  $("error").hidden = true;
  const opts = trainOptions();
  if (app.model && app.model.optimizer !== $("optimizer").value) await changeOptimizer();
  if (app.epoch >= opts.epochs) {
    // "Epochs" is the run's total: a finished run continues for that many more, and says so.
    opts.epochs = app.epoch + opts.epochs;
    $("epochs").value = String(opts.epochs);
    setStatus("train-status", `Continuing to epoch ${opts.epochs}.`);
  }
  if (app.step === 0 && !app.epochs.length) resetPlots();
  $("diverged").hidden = true;
  metricPlot.xRange = [0, opts.epochs];
  app.training = true;
  refreshButtons();
  try { await client.call("train", opts); } catch (e) { app.training = false; throw e; }
}, $("start"));
$("pause").onclick = () => guarded(null, () => client.call("pause"));
$("resume-train").onclick = () => guarded(null, () => client.call("resume"));
$("stop").onclick = () => guarded(null, () => client.call("stop"));
for (const id of ["batch-size", "lr"]) {
  $(id).addEventListener("change", () => {
    if (!app.training) return;
    guarded(null, () => client.call("configure", { batchSize: parseInt($("batch-size").value, 10) || undefined,
                                                    learningRate: parseFloat($("lr").value) || undefined }));
  });
}
/** Another optimizer for the same weights (only the optimizer model is made again; moments restart). */
async function changeOptimizer() {
  const before = app.model.optimizer;
  app.model = await client.call("changeOptimizer", { optimizer: $("optimizer").value });
  describeSetup();
  setStatus("train-status", `Optimizer changed from ${before} to ${app.model.optimizer}; the weights learnt so far are kept` +
    (app.step ? ` (step ${nf.format(app.step)}).` : "."));
}
$("optimizer").onchange = () => {
  if (app.model && app.model.ready && !app.training) guarded(null, changeOptimizer, $("optimizer"));
};

// ------------------------------------------------------------------ setting up data + model

function afterModel(model) {
  app.model = model;
  app.step = 0; app.epoch = 0;
  app.saved = null;
  setStatus("saved-status", "");
  $("epoch-bar").style.width = "0%";
  $("optimizer").value = ["AdamW", "Adam", "SGD"].includes(model.optimizer) ? model.optimizer : $("optimizer").value;
  resetPlots();
  setStatus("train-status", "Ready to train.");
  clearTry();
  describeSetup();
  showTryPanel();
}

/** A new model: the Try panel must not show the previous model's input or prediction. */
function clearTry() {
  $("pad-clear").click();
  $("row-input").value = "";
  $("row-result").textContent = "";
}

function afterData(data) {
  app.data = data;
  if (!data.added) setStatus("added-status", "");
  describeSetup();
  showTryPanel();
}

$("digits-build").onclick = () => guarded($("digits-build"), async () => {
  const kind = $("digits-model").value;
  setStatus("setup-status", "Loading digits and building the model…");
  afterData(await client.call("useDigits", { nTrain: parseInt($("digits-count").value, 10), nVal: 1000 }));
  if (app.drawn.length) {   // the user's own digits stay in the training set across rebuilds
    const x = new Float32Array(app.drawn.length * 784);
    app.drawn.forEach((d, i) => x.set(d.x, i * 784));
    afterData(await client.call("addSamples", { x, shape: [app.drawn.length, 784], y: app.drawn.map((d) => d.y) }));
    setStatus("added-status", `Your ${app.drawn.length} drawn digit${app.drawn.length > 1 ? "s are" : " is"} still in the training set.`);
  }
  app.rebuild = async (optimizer) => afterModel(await client.call("buildDigits", { kind, optimizer }));
  await app.rebuild($("optimizer").value);
  if (kind === "cnn" && parseFloat($("lr").value) > 0.005) $("lr").value = "0.002";
});

// CSV for "Your table"
let tableCSV = null;
async function inspectInto(input, select, info) {
  // forget the previous file first: a failed upload must not leave its columns and Build button
  select.innerHTML = "";
  select.disabled = true;
  if (info) info.textContent = "";
  refreshButtons();
  const file = await readText(input);
  if (!file) return null;
  const res = await client.call("inspectCSV", { text: file.text });
  select.innerHTML = "";
  res.columns.forEach((c, i) => {
    const o = document.createElement("option");
    o.value = c; o.textContent = res.numeric[i] ? c : `${c} (text)`;
    select.appendChild(o);
  });
  select.value = res.label;
  select.disabled = false;
  const missing = res.details.reduce((a, c) => a + c.missing, 0);
  if (info) info.textContent = `${file.name}: ${nf.format(res.rows)} rows, ${res.columns.length} columns, separated by ` +
    `${separatorName(res.delimiter)}` + (missing ? `; ${nf.format(missing)} missing values (see below).` : ".");
  return { name: file.name, text: file.text, columns: res.columns, details: res.details };
}
$("csv-file").onchange = () => guarded(null, async () => {
  tableCSV = null;
  $("csv-columns").hidden = true;
  tableCSV = await inspectInto($("csv-file"), $("csv-label"), $("csv-info"));
  if (tableCSV) renderColumns($("csv-columns"), tableCSV.details, $("csv-label").value, refreshButtons);
}, $("csv-file"));
$("csv-label").onchange = () => {
  if (tableCSV) renderColumns($("csv-columns"), tableCSV.details, $("csv-label").value, refreshButtons);
  refreshButtons();
};
$("csv-build").onclick = () => guarded($("csv-build"), async () => {
  if (!tableCSV) throw new Error("Choose a CSV file first.");
  const hidden = $("csv-hidden").value.split(/[,\s]+/).filter(Boolean).map((v) => parseInt(v, 10));
  if (!hidden.length || hidden.some((h) => !(h > 0))) throw new Error("Hidden layers: give positive sizes like 32 or 64,32.");
  setStatus("setup-status", "Reading the table and building the model…");
  afterData(await client.call("useCSV", { text: tableCSV.text, label: $("csv-label").value, task: $("csv-task").value || null,
                                          exclude: excludedColumns($("csv-columns")), missing: $("csv-missing").value, onehot: true }));
  app.rebuild = async (optimizer) => afterModel(await client.call("buildMLP", { hidden, optimizer }));
  await app.rebuild($("optimizer").value);
});

// "Your model": an inference model, or ready artifacts, plus data
$("onnx-file").onchange = () => guarded(null, async () => {
  app.onnxUpload = null;
  $("onnx-params").innerHTML = "";
  $("onnx-info").textContent = "";
  // the .onnx, plus the files uploaded with it (its .onnx.data external data), by file name
  const chosen = await readFiles($("onnx-file"));
  if (!chosen.length) return;
  const main = chosen.find((f) => /\.onnx$/i.test(f.name)) || chosen[0];
  const extraFiles = {};
  for (const f of chosen) if (f !== main) extraFiles[f.name] = new Uint8Array(f.data);
  const file = { name: main.name, bytes: new Uint8Array(main.data), extraFiles };
  const info = await client.call("inspectModel", { bytes: file.bytes.slice(), name: file.name, extraFiles });
  app.onnxUpload = file;
  const ins = info.inputs.map((i) => `${i.name} [${i.shape.map((d) => d === null ? "?" : d).join(", ")}]`).join(", ");
  const outs = info.outputs.map((o) => o.name).join(", ");
  $("onnx-info").textContent = `${file.name}: ${info.nodes} nodes (${info.ops.join(", ")}); input ${ins}; output ${outs}. Trainable parameters:`;
  for (const p of info.params.filter((p) => p.float)) {
    const label = document.createElement("label");
    label.innerHTML = `<input type="checkbox"> <span></span>`;
    label.querySelector("input").value = p.name;
    label.querySelector("input").checked = p.trains !== false;  // what trains by default, as PyTorch would
    label.querySelector("span").textContent = `${p.name} [${p.shape.join("×")}]`;
    if (p.why) label.title = (p.trains === false ? "not trained by default: " : "") + p.why;
    $("onnx-params").appendChild(label);
  }
}, $("onnx-file"));
$("onnx-generate").onclick = () => guarded($("onnx-generate"), async () => {
  const file = app.onnxUpload;
  const requiresGrad = Array.from($("onnx-params").querySelectorAll("input:checked")).map((i) => i.value);
  if (!requiresGrad.length) throw new Error("Tick at least one parameter to train.");
  const loss = $("onnx-loss").value;
  const batchnorm = $("onnx-batchnorm").value;
  setStatus("setup-status", "Generating training artifacts…");
  app.rebuild = async (optimizer) => {
    afterModel(await client.call("generate",
      { bytes: file.bytes.slice(), loss, optimizer, requiresGrad, name: file.name, extraFiles: file.extraFiles, batchnorm }));
    await applyScaling();
  };
  await app.rebuild($("optimizer").value);
});
$("artifact-files").onchange = refreshButtons;

/** An uploaded model trained on a table: standardise its features (and scale regression targets). */
async function applyScaling() {
  if (!app.model || !app.model.ready || app.model.origin !== "upload" || !app.data || app.data.kind !== "csv") return;
  if (app.step > 0) return;
  app.model = await client.call("setScaling", { features: $("data-standardize").checked });
  describeSetup();
}
$("data-standardize").onchange = () => guarded(null, applyScaling, $("data-standardize"));
$("artifacts-use").onclick = () => guarded($("artifacts-use"), async () => {
  const files = (await readFiles($("artifact-files"))).map((f) => ({ name: f.name, data: new Uint8Array(f.data) }));
  if (!files.length) throw new Error("Choose the run's .zip, or the artifact files, first.");
  setStatus("setup-status", "Reading the files…");
  const res = await client.call("useArtifactFiles", { files });
  app.rebuild = null;
  if (res.data && res.data.loaded) afterData(res.data);
  afterModel(res.model);
  app.step = res.step; app.epoch = res.epoch;
  if (res.batch_size) $("batch-size").value = res.batch_size;
  if (res.lr) $("lr").value = res.lr;
  const took = Object.entries(res.files).filter(([, what]) => !/run file/.test(what))
    .map(([name, what]) => `${name.split("!").pop()}: ${what.split(" (")[0]}`).join(", ");
  setStatus("train-status", (res.step ? `Taken back at epoch ${res.epoch}, step ${nf.format(res.step)}. ` : "Ready to train. ") +
    `Recognised ${took}.`);
  refreshButtons();
});
let modelCSV = null;
$("data-csv-file").onchange = () => guarded(null, async () => {
  modelCSV = null;
  modelCSV = await inspectInto($("data-csv-file"), $("data-csv-label"), null);
}, $("data-csv-file"));
$("data-csv-label").onchange = refreshButtons;
$("data-csv-load").onclick = () => guarded($("data-csv-load"), async () => {
  if (!modelCSV) throw new Error("Choose a CSV file first.");
  afterData(await client.call("useCSV", { text: modelCSV.text, label: $("data-csv-label").value, task: $("data-csv-task").value || null }));
  await applyScaling();
});
for (const id of ["data-images", "data-folder"]) $(id).onchange = refreshButtons;
$("data-images-load").onclick = () => guarded($("data-images-load"), async () => {
  const files = (await readFiles($("data-images"))).concat(await readFiles($("data-folder")))
    .filter((f) => /\.(png|jpe?g|gif|bmp|webp)$/i.test(f.name));
  if (!files.length) throw new Error("No image files (png, jpg, gif, bmp, webp) were chosen.");
  setStatus("setup-status", `Decoding ${files.length} images…`);
  afterData(await client.call("useImages", { files }, files.map((f) => f.data)));
});

// ------------------------------------------------------------------ trying the model

const pad = new DrawPad($("pad"), { onStroke: () => predictDrawing() });
app.padEmpty = () => pad.empty;
for (let d = 0; d < 10; d++) {
  const o = document.createElement("option");
  o.value = o.textContent = String(d);
  $("add-label").appendChild(o);
}

function showTryPanel() {
  const d = app.data;
  const kind = d && d.loaded ? d.kind : "digits";
  const digitsLike = kind === "digits";
  const rows = kind === "csv";
  $("try-digits").hidden = !digitsLike;
  $("try-row").hidden = !rows;
  $("try-none").hidden = digitsLike || rows;
  if (rows && d.features) {
    $("row-columns").textContent = d.features.join(", ");
    $("row-input").placeholder = d.features.map(() => "0").join(", ");
  }
  refreshButtons();
}

function renderPrediction(res) {
  const box = $("prediction");
  box.innerHTML = "";
  const probs = res.probabilities[0];
  const best = res.class[0];
  probs.forEach((p, i) => {
    const name = document.createElement("span");
    name.textContent = app.data && app.data.classes ? app.data.classes[i] : String(i);
    const bar = document.createElement("div");
    bar.className = "pbar" + (i === best ? " best-bar" : "");
    const fill = document.createElement("div");
    fill.style.width = `${(100 * p).toFixed(1)}%`;
    bar.appendChild(fill);
    const val = document.createElement("span");
    val.textContent = `${(100 * p).toFixed(1)}%`;
    if (i === best) { name.className = val.className = "best"; }
    box.append(name, bar, val);
  });
  box.dataset.prediction = res.label[0];
}

let predicting = false;
async function predictDrawing() {
  const x = pad.toMNIST();
  paintDigit($("pad-preview"), x);
  if (!x) return;
  app.lastPrediction = { input: Array.from(x) };
  refreshButtons();
  if (!app.ready || !app.model || !app.model.ready || predicting) return;
  predicting = true;
  try {
    const res = await client.call("predict", { x, shape: [1, 784] });
    app.lastPrediction = { input: Array.from(x), probabilities: res.probabilities[0], outputs: res.outputs[0], label: res.label[0] };
    renderPrediction(res);
  } catch (e) { showError(e, $("pad")); } finally { predicting = false; refreshButtons(); }
}

$("pad-clear").onclick = () => {
  pad.clear();
  paintDigit($("pad-preview"), null);
  $("prediction").innerHTML = "";
  delete $("prediction").dataset.prediction;
  app.lastPrediction = null;
  refreshButtons();
};

$("add-sample").onclick = () => guarded($("add-sample"), async () => {
  const x = pad.toMNIST();
  if (!x) throw new Error("Draw a digit first.");
  const label = parseInt($("add-label").value, 10);
  const summary = await client.call("addSamples", { x, shape: [1, 784], y: [label] });
  app.drawn.push({ x: Array.from(x), y: label });
  afterData(summary);
  setStatus("added-status", `Added a "${label}". The training set now has ${nf.format(summary.train)} digits ` +
    `(${summary.added} of them yours); they are used from the next epoch on.`);
  $("pad-clear").click();
});

$("row-predict").onclick = () => guarded($("row-predict"), async () => {
  const values = $("row-input").value.split(/[,;\s]+/).filter(Boolean).map(Number);
  const n = app.data && app.data.features ? app.data.features.length : values.length;
  if (values.length !== n || values.some((v) => !Number.isFinite(v))) {
    throw new Error(`Type ${n} numbers separated by commas (${(app.data.features || []).join(", ")}).`);
  }
  const res = await client.call("predict", { x: new Float32Array(values), shape: [1, n] });
  app.lastPrediction = { input: values, outputs: res.outputs[0], probabilities: res.probabilities ? res.probabilities[0] : null, label: res.label ? res.label[0] : null };
  $("row-result").textContent = res.label
    ? `Prediction: ${res.label[0]} (${(100 * Math.max(...res.probabilities[0])).toFixed(1)}% confident)`
    : `Prediction: ${res.outputs[0].map((v) => v.toPrecision(5)).join(", ")}`;
});

// ------------------------------------------------------------------ downloads

$("download-checkpoint").onclick = () => guarded($("download-checkpoint"), async () => {
  download(await client.call("checkpoint"), `pytrain-step${app.step}.ckpt`);
});
$("download-run").onclick = () => guarded($("download-run"), async () => {
  const epochs = parseInt($("epochs").value, 10) || undefined;
  download(await client.call("runFile", { epochs }), `pytrain-run-step${app.step}.zip`, "application/zip");
});
$("download-model").onclick = () => guarded($("download-model"), async () => {
  download(await client.call("exportModel"), `pytrain-model-step${app.step}.onnx`);
});

// ------------------------------------------------------------------ resume a saved run

async function offerResume() {
  const saved = await client.call("savedRun");
  if (!saved) return;
  const m = saved.model || {};
  const src = saved.dataSource || {};
  const what = m.origin === "digits" ? `digits ${String(m.kind).toUpperCase()}` : m.origin === "mlp" ? "table MLP" : "model";
  const data = src.kind === "csv" ? ` on column "${src.label}"` : "";
  $("resume-text").textContent = `A saved ${what} run${data} is in this browser: epoch ${saved.epoch}, step ` +
    `${nf.format(saved.step)} (saved ${new Date(saved.savedAt).toLocaleString()}). Resume it?`;
  $("resume-banner").hidden = false;
  $("resume-banner").dataset.step = String(saved.step);
  $("resume-banner").dataset.digest = saved.digest;
  app.savedRun = saved;
}

$("resume-btn").onclick = () => guarded($("resume-btn"), async () => {
  setStatus("setup-status", "Restoring the saved run…");
  const res = await client.call("resumeSaved");
  app.resumed = res;
  app.data = res.data;
  app.rebuild = null;
  afterModel(res.model);
  app.step = res.step; app.epoch = res.epoch;
  loadHistory(res.history);
  const t = res.train || {};
  if (t.epochs) { $("epochs").value = t.epochs; metricPlot.xRange = [0, t.epochs]; metricPlot.draw(); }
  if (t.batchSize) $("batch-size").value = t.batchSize;
  if (t.learningRate) $("lr").value = t.learningRate;
  $("resume-banner").hidden = true;
  setStatus("train-status", `Resumed at epoch ${res.epoch}, step ${nf.format(res.step)}.`);
  refreshButtons();
  // It was interrupted mid-run: carry on where it stopped.
  if (t.epochs && res.epoch < t.epochs && app.savedRun && app.savedRun.reason === "epoch") $("start").click();
});
$("discard-btn").onclick = () => guarded($("discard-btn"), async () => {
  await client.call("clearSaved");
  $("resume-banner").hidden = true;
});

// ------------------------------------------------------------------ start

describeSetup();
refreshButtons();
offerResume().catch((e) => console.warn("no saved run available:", e.message || e));
