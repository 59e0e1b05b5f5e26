// Panel 2, Train: the plots and their table, training events and controls, divergence, downloads.

import { LinePlot } from "./plot.js";
import { download } from "./files.js";
import { $, announce, describeSetup, guarded, hideError, mib, nf, refreshButtons, setStatus, untilHint } from "./ui.js";
import { app, client, emit, on } from "./store.js";

// ------------------------------------------------------------------ plots

const lossPlot = new LinePlot($("loss-plot"), { title: "Training loss", xLabel: "step", integerX: true });
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
app.plots = { loss: lossPlot, metric: metricPlot };   // legend boxes etc., for the tests

function resetPlots() {
  lossSeries.points = []; emaSeries.points = []; valLossSeries.points = []; metricSeries.points = [];
  ema = null;
  lossRange = [Infinity, 0];
  lossPlot.logY = false;
  app.epochs = [];
  lossPlot.draw(); metricPlot.draw();
  if ($("run-file-note")) showNoResume(null);   // said of the previous model's run file
}

function addLosses(firstStep, losses) {
  // (steps from firstStep on were shown before: the GPU failed and the CPU retrains from its last read back)
  const last = (pts) => pts[pts.length - 1];
  if (lossSeries.points.length && last(lossSeries.points)[0] >= firstStep) {
    while (lossSeries.points.length && last(lossSeries.points)[0] >= firstStep) { lossSeries.points.pop(); emaSeries.points.pop(); }
    ema = emaSeries.points.length ? last(emaSeries.points)[1] : null;
  }
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

/** The plots' text alternative: the last few steps and every epoch's validation result, as a table. */
function renderPlotTable() {
  const body = $("plot-table").querySelector("tbody");
  body.innerHTML = "";
  const row = (cells) => {
    const tr = document.createElement("tr");
    cells.forEach((c, i) => {
      const cell = document.createElement(i === 0 ? "th" : "td");
      if (i === 0) cell.scope = "row";
      cell.textContent = c;
      tr.appendChild(cell);
    });
    body.appendChild(tr);
  };
  const fmt = (v) => (v === null || v === undefined || !Number.isFinite(v) ? "–" : Number(v).toPrecision(4));
  for (const [step, loss] of lossSeries.points.slice(-5)) row(["batch", "", nf.format(step), fmt(loss), ""]);
  for (const e of app.epochs.slice(-10)) {
    row(["validation", String(e.epoch), nf.format(e.step), fmt(e.loss),
         e.metricName === "accuracy" ? `${(100 * e.metric).toFixed(1)}% accuracy` : `${e.metricName} ${fmt(e.metric)}`]);
  }
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
  renderPlotTable();
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
    : `validation ${rec.metricName === "perplexity" ? "perplexity" : rec.metricName.toUpperCase()} ${rec.metric.toPrecision(4)}`;
}

// ------------------------------------------------------------------ what the other panels change

on("model", (model) => {   // a new model: nothing trained yet
  setStatus("saved-status", "");
  $("epoch-bar").style.width = "0%";
  $("optimizer").value = ["AdamW", "Adam", "SGD"].includes(model.optimizer) ? model.optimizer : $("optimizer").value;
  resetPlots();
  setStatus("train-status", "Ready to train.");
});
on("history", loadHistory);
on("settings", (t) => {   // a resumed run's settings
  if (t.epochs) { $("epochs").value = t.epochs; metricPlot.xRange = [0, t.epochs]; metricPlot.draw(); }
  if (t.batchSize) $("batch-size").value = t.batchSize;
  batchHint();
  if (t.learningRate) $("lr").value = t.learningRate;
});

// ------------------------------------------------------------------ the device that trains

/** "Trains on GPU: <adapter>" or "Trains on CPU, N threads" and why not the GPU (worker/boot.js describeDevice). */
function showDevice(d) {
  if (!d) return;
  app.device = d;
  $("device").value = d.mode;
  $("device-status").textContent = `Trains on ${d.device}` + (d.reason && d.mode !== "off" ? ` (not the GPU: ${d.reason}).` : ".");
}
client.on("ready", (v) => showDevice(v.gpu));
client.on("device", showDevice);
$("device").onchange = () => guarded(null, async () => {
  const gpu = $("device").value;
  try { localStorage.setItem("pytrain-gpu", gpu); } catch (e) { /* storage blocked: this visit only */ }
  showDevice(await client.call("setDevice", { gpu }));
}, $("device"));

// ------------------------------------------------------------------ training events

let lastProgress = null;
client.on("progress", (p) => {
  if (app.timing.firstStep === null) app.timing.firstStep = performance.now();
  lastProgress = p;
  app.step = p.step; app.epoch = p.epoch;
  addLosses(p.firstStep, p.losses);
  const frac = p.stepsPerEpoch ? p.epochStep / p.stepsPerEpoch : 0;
  $("epoch-bar").style.width = `${Math.round(100 * frac)}%`;
  // a slice with no step, or a refused step's non-finite loss (the divergence box says what happened): no "NaN"
  const loss = p.losses.length ? p.losses[p.losses.length - 1] : NaN;
  const lossText = Number.isFinite(loss) ? loss.toFixed(4) : "–";
  const last = app.epochs[app.epochs.length - 1];
  // shown, not announced: this changes several times a second
  $("train-status").textContent = `Epoch ${Math.min(p.epoch + 1, p.epochs)} of ${p.epochs} · step ${nf.format(p.step)} · ` +
    `${p.stepsPerSecond.toFixed(1)} steps/s · loss ${lossText}` + (last ? ` · ${metricText(last)}` : "") +
    (p.wasmHeap ? ` · memory ${mib(p.wasmHeap)} (peak)` : "");
  if (p.wasmHeap) app.peakMemory = p.wasmHeap;
  $("train-status").classList.remove("ok", "bad");
});
client.on("epoch", (rec) => {
  addEpoch(rec);
  announce(`Epoch ${rec.epoch} done` + (metricText(rec) ? `: ${metricText(rec)}.` : "."));
});
client.on("saved", (s) => {
  app.saved = s;
  setStatus("saved-status", `Saved in this browser at step ${nf.format(s.step)} (${s.epochStep ? "during" : "after"} epoch ` +
    `${s.epochStep ? s.epoch + 1 : s.epoch}) ` +
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
  renderPlotTable();
  if (d.reason === "diverged") { showDivergence(d); refreshButtons(); return; }
  const what = d.reason === "finished" ? "Finished" : d.reason === "stopped" ? "Stopped" : "Stopped after an error";
  const said = metricText(last);
  setStatus("train-status", `${what} at epoch ${d.epoch}, step ${nf.format(d.step || 0)}.` +
    (said ? ` ${said[0].toUpperCase()}${said.slice(1)}.` : "") +
    (app.peakMemory ? ` Peak memory ${mib(app.peakMemory)}.` : ""), d.reason === "finished");
  if (d.reason !== "error") $("epoch-bar").style.width = "100%";
  refreshButtons();
  if (d.reason !== "error") emit("trained");
});

/** A run whose loss became non-finite or exploded: say so, and offer the last good checkpoint. */
function showDivergence(d) {
  const div = d.divergence || {};
  const good = div.good || { epoch: 0, step: 0 };
  app.divergence = div;
  if (div.loss) addLosses(div.step, [div.loss]);   // the step that blew up (its update was not applied)
  setStatus("train-status", `Diverged at step ${nf.format(div.step || d.step || 0)}: the loss blew up, so training stopped. ` +
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
  if (!(epochs >= 1)) throw new Error("\"Train until epoch\" must be a whole number of at least 1.");
  if (!(batchSize >= 1)) throw new Error("Batch size must be a whole number of at least 1.");
  if (!(learningRate > 0)) throw new Error("The learning rate must be a positive number.");
  // the page keeps its runs in IndexedDB (the widget only when asked: TabRun.persist's default is the widget's)
  return { epochs, batchSize, learningRate, persist: true, saveEveryMs: app.saveEveryMs };
}

$("start").onclick = () => guarded(null, async () => {
  hideError();
  const opts = trainOptions();
  if (app.model && app.model.optimizer !== $("optimizer").value) await changeOptimizer();
  if (app.epoch >= opts.epochs) throw new Error(untilHint());   // Start is disabled then; a typed value may not have told it yet
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
/** A batch larger than the training set makes each epoch one step: say so, and offer a size that
 * gives at least four steps an epoch. */
function batchHint() {
  const hint = $("batch-hint");
  const n = app.data && app.data.loaded ? app.data.train : 0;
  const batch = parseInt($("batch-size").value, 10);
  hint.hidden = !(n > 0 && batch > n);
  if (hint.hidden) return;
  let size = 1;
  while (size * 2 * 4 <= n) size *= 2;
  hint.querySelector("span").textContent = `Batch size ${nf.format(batch)} is more than the ${nf.format(n)} training ` +
    "examples: each epoch would be a single step, and the model learns slowly.";
  const use = hint.querySelector("button");
  use.textContent = `Use ${size}`;
  use.onclick = () => {
    $("batch-size").value = String(size);
    $("batch-size").dispatchEvent(new Event("change"));
    batchHint();
    $("batch-size").focus();
  };
}
$("batch-size").addEventListener("input", batchHint);
$("epochs").addEventListener("input", refreshButtons);   // Start says when the run is already there
on("data", batchHint);
on("model", batchHint);

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

// ------------------------------------------------------------------ downloads

$("download-checkpoint").onclick = () => guarded($("download-checkpoint"), async () => {
  download(await client.call("checkpoint"), `pytrain-step${app.step}.ckpt`);
});
$("download-run").onclick = () => guarded($("download-run"), async () => {
  const epochs = parseInt($("epochs").value, 10) || undefined;
  const bytes = await client.call("runFile", { epochs });
  download(bytes, `pytrain-run-step${app.step}.zip`, "application/zip");
  showNoResume(zipComment(bytes).match(/^pytrain\.no_resume: ([^]*)$/));
});

/** One line under the downloads when `pytrain train --resume` cannot continue the run file, saying why
 *  (the reason its zip comment repeats, see pytrain/webapp/runfile.py). Not a live region: the
 *  download button is described by it. */
function showNoResume(why) {
  let note = $("run-file-note");
  if (!note) {
    note = document.createElement("p");
    note.id = "run-file-note";
    note.className = "help small";
    $("download-run").closest(".buttons").after(note);
    $("download-run").setAttribute("aria-describedby", note.id);
  }
  note.textContent = why ? `This run file goes back into this page or the widget in any browser, ` +
    `but not into pytrain train --resume: ${why[1]}.` : "";
  note.hidden = !why;
}

/** A zip's comment: the text after its end-of-central-directory record. */
function zipComment(b) {
  for (let i = b.length - 22; i >= Math.max(0, b.length - 22 - 65535); i--) {
    if (b[i] === 0x50 && b[i + 1] === 0x4b && b[i + 2] === 5 && b[i + 3] === 6) {
      return new TextDecoder().decode(b.subarray(i + 22, i + 22 + (b[i + 20] | (b[i + 21] << 8))));
    }
  }
  return "";
}
$("download-model").onclick = () => guarded($("download-model"), async () => {
  download(await client.call("exportModel"), `pytrain-model-step${app.step}.onnx`);
});
