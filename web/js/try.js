// Panel 3, Try the model: the drawing pad (mouse, touch or keyboard), a typed row, and for image
// models the camera, a picture file or a drawing pad of their own.

import { DrawPad, paintDigit } from "./draw.js";
import { $, guarded, nf, refreshButtons, setStatus, showError } from "./ui.js";
import { app, client, on, setData } from "./store.js";
import { cameraOn, pixels, video } from "./images.js";

// ------------------------------------------------------------------ trying the model

const pad = new DrawPad($("pad"), { onStroke: () => predictDrawing(), onClear: () => $("pad-clear").click() });
app.padEmpty = () => pad.empty;
for (let d = 0; d < 10; d++) {
  const o = document.createElement("option");
  o.value = o.textContent = String(d);
  $("add-label").appendChild(o);
}

function showTryPanel() {
  const d = app.data;
  // before any data, the digits tab's pad (it predicts once a digits model is built); other tabs: nothing yet
  const kind = d && d.loaded ? d.kind : app.tab === "digits" ? "digits" : null;
  const digitsLike = kind === "digits";
  const rows = kind === "csv";
  const text = kind === "text" || kind === "text_csv";   // "Your text": its samples (text.js)
  const shape = app.model && app.model.ready ? app.model.sample_shape || [] : [];
  const images = !digitsLike && !rows && shape.length === 3 && shape.every((v) => v > 0);
  $("try-digits").hidden = !digitsLike;
  $("try-row").hidden = !rows;
  $("try-text").hidden = !text;
  $("try-image").hidden = !images;
  $("try-empty").hidden = !!kind || images;
  $("try-none").hidden = !kind || digitsLike || rows || images || text;
  if (rows && d.features) {
    const cols = tableColumns(d);
    $("row-columns").textContent = cols.map((c) => c.kind === "text"
      ? `${c.name} (${c.values.join(", ")})` : c.name).join(", ");
    $("row-input").placeholder = cols.map((c) => (c.kind === "text" ? c.values[0] : "0")).join(", ");
  }
  refreshButtons();
}

/** The table's columns as a row is typed: text columns as text (the export takes them so too). */
function tableColumns(d) {
  return d.columns || d.features.map((name) => ({ name, kind: "number" }));
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
    $("add-label").value = String(res.class[0]);   // "This is a" starts at what the model said: correct it when wrong
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
  setData(summary);
  setStatus("added-status", `Added a "${label}". The training set now has ${nf.format(summary.train)} digits ` +
    `(${summary.added} of them yours); they are used from the next epoch on.`);
  $("pad-clear").click();
});

$("row-predict").onclick = () => guarded($("row-predict"), async () => {
  const cols = tableColumns(app.data);
  const typed = $("row-input").value.trim();
  let row = typed.split(/[,;\t]/).map((c) => c.trim());
  if (row.length === 1 && cols.length > 1) row = typed.split(/\s+/);   // numbers separated by spaces
  const res = await client.call("predict", { row });
  app.lastPrediction = { input: row, outputs: res.outputs[0], probabilities: res.probabilities ? res.probabilities[0] : null, label: res.label ? res.label[0] : null };
  $("row-result").textContent = res.label
    ? `Prediction: ${res.label[0]} (${(100 * Math.max(...res.probabilities[0])).toFixed(1)}% confident)`
    : `Prediction: ${res.outputs[0].map((v) => v.toPrecision(5)).join(", ")}`;
});

// image models: the camera, or a picture file
let live = null;
/** Predict from the camera twice a second (or stop); `show` renders a prediction result. */
function toggleLivePrediction(show) {
  if (live) { clearInterval(live); live = null; $("cam-predict").textContent = "Predict from the camera"; return; }
  return cameraOn().then(() => {
    $("cam-predict").textContent = "Stop predicting";
    let busy = false;
    const shape = app.model.sample_shape;
    live = setInterval(async () => {
      if (busy || app.training) return;
      busy = true;
      try {
        const x = pixels(video, shape);   // the frame as the model gets it (kept with the prediction)
        show(Object.assign(await client.call("predict", { x, shape: [1].concat(shape) }), { input: x }));
      } finally { busy = false; }
    }, 500);
  });
}

/** An image file through the model. */
async function predictFile(file, show) {
  const bmp = await createImageBitmap(file).catch(() => { throw new Error(`${file.name}: not an image the browser can decode`); });
  const shape = app.model.sample_shape;
  const x = pixels(bmp, shape);
  bmp.close();
  show(Object.assign(await client.call("predict", { x, shape: [1].concat(shape) }), { input: x }));
}

/** A prediction for an image model, on the line of where it came from (camera or picture, or the pad). */
function showImagePrediction(res, line = $("picture-prediction")) {
  app.lastPrediction = { outputs: res.outputs[0], probabilities: res.probabilities ? res.probabilities[0] : null,
                         label: res.label ? res.label[0] : null, input: res.input ? Array.from(res.input) : null };
  line.textContent = res.label
    ? `Prediction: ${res.label[0]} (${(100 * Math.max(...res.probabilities[0])).toFixed(1)}% confident)`
    : `Prediction: ${res.outputs[0].map((v) => v.toPrecision(4)).join(", ")}`;
}
$("cam-predict").onclick = () => guarded(null, () => toggleLivePrediction(showImagePrediction), $("cam-predict"));
$("image-predict").onchange = () => guarded(null, async () => {
  const f = $("image-predict").files[0];
  if (f) await predictFile(f, showImagePrediction);
}, $("image-predict"));

// image models, drawn: the same pad as the By example tab's (white on black), predicting after each stroke
const imagePad = new DrawPad($("image-pad"), { lineWidth: 0.09, onStroke: () => predictImagePad(),
                                                onClear: () => $("image-pad-clear").click() });
let imagePredicting = false;

/** After an epoch: the drawing on whichever pad is shown, predicted again by the updated model. */
function predictPads() {
  if (!$("try-digits").hidden && !pad.empty) predictDrawing();
  if (!$("try-image").hidden) predictImagePad();   // returns at once when that pad is empty
}

async function predictImagePad() {
  if (imagePad.empty || !app.ready || !app.model || !app.model.ready || imagePredicting) return;
  imagePredicting = true;
  try {
    const shape = app.model.sample_shape;
    const x = pixels(imagePad.canvas, shape);   // as a By example drawing is read
    showImagePrediction(Object.assign(await client.call("predict", { x, shape: [1].concat(shape) }), { input: x }),
                        $("image-pad-prediction"));
  } catch (e) { showError(e, $("image-pad")); } finally { imagePredicting = false; refreshButtons(); }
}
$("image-pad-clear").onclick = () => {
  imagePad.reset();
  $("image-pad-prediction").textContent = "";
  app.lastPrediction = null;
  refreshButtons();
};

// ------------------------------------------------------------------ what the other panels change

/** A new model: the Try panel must not show the previous model's input or prediction. */
function clearTry() {
  $("pad-clear").click();
  $("row-input").value = "";
  $("row-result").textContent = "";
  if (live) toggleLivePrediction();     // the camera's predictions were the old model's (and its input size)
  $("image-predict").value = "";
  $("picture-prediction").textContent = "";
  $("image-pad-clear").click();
}

on("model", () => { clearTry(); showTryPanel(); });
on("data", showTryPanel);
on("tab", showTryPanel);
client.on("epoch", predictPads);
