// Panel 1, Data and model: the digits, a table of your own, or your model with its data.

import { readFiles, readText } from "./files.js";
import { excludedColumns, renderColumns, separatorName } from "./columns.js";
import { $, describeSetup, guarded, hideError, nf, refreshButtons, setStatus } from "./ui.js";
import { app, client, emit, on, setData, setModel } from "./store.js";

// ------------------------------------------------------------------ setting up data + model

on("model", describeSetup);
on("data", (data) => {
  if (!data.added) setStatus("added-status", "");
  describeSetup();
});

$("digits-build").onclick = () => guarded($("digits-build"), async () => {
  const kind = $("digits-model").value;
  setStatus("setup-status", "Loading digits and building the model…");
  setData(await client.call("useDigits", { nTrain: parseInt($("digits-count").value, 10), nVal: 1000 }));
  if (app.drawn.length) {   // the user's own digits stay in the training set across rebuilds
    const x = new Float32Array(app.drawn.length * 784);
    app.drawn.forEach((d, i) => x.set(d.x, i * 784));
    setData(await client.call("addSamples", { x, shape: [app.drawn.length, 784], y: app.drawn.map((d) => d.y) }));
    setStatus("added-status", `Your ${app.drawn.length} drawn digit${app.drawn.length > 1 ? "s are" : " is"} still in the training set.`);
  }
  app.rebuild = async (optimizer) => setModel(await client.call("buildDigits", { kind, optimizer }));
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
  setData(await client.call("useCSV", { text: tableCSV.text, label: $("csv-label").value, task: $("csv-task").value || null,
                                          exclude: excludedColumns($("csv-columns")), missing: $("csv-missing").value, onehot: true }));
  app.rebuild = async (optimizer) => setModel(await client.call("buildMLP", { hidden, optimizer }));
  await app.rebuild($("optimizer").value);
});

// "Your model": an inference model, or ready artifacts, plus data
/** Forget the shown model: its description, weights list, presets and count. */
function clearOnnx() {
  app.onnxUpload = null;
  $("onnx-params").innerHTML = "";
  $("onnx-info").textContent = "";
  $("onnx-fixed").querySelector("ul").innerHTML = "";
  for (const id of ["onnx-presets", "onnx-count", "onnx-fixed"]) $(id).hidden = true;
}
/** The live count of what trains: the ticked weights' values. */
function countTrainable() {
  const params = app.onnxUpload ? app.onnxUpload.params : [];
  const ticked = new Set(Array.from($("onnx-params").querySelectorAll("input:checked")).map((i) => i.value));
  const on = params.filter((p) => ticked.has(p.name));
  const total = params.reduce((a, p) => a + p.size, 0);
  const lastN = app.onnxUpload && app.onnxUpload.lastN;
  $("onnx-count").textContent = `${nf.format(on.reduce((a, p) => a + p.size, 0))} of ${nf.format(total)} weight values ` +
    `train (${on.length} of ${params.length} weights ticked` + (lastN ? `: the last ${lastN} layer${lastN === 1 ? "" : "s"})` : ").");
}
/** Tick the weights `keep(p)` says, untick the others. */
function tickWeights(keep, lastN = null) {
  app.onnxUpload.lastN = lastN;   // "Last N layers" goes to the generator as such (trainable_ops), the others as ticks
  const byName = new Map(app.onnxUpload.params.map((p) => [p.name, p]));
  for (const box of $("onnx-params").querySelectorAll("input")) box.checked = !!keep(byName.get(box.value));
  countTrainable();
}
$("onnx-params").onchange = () => { app.onnxUpload.lastN = null; countTrainable(); };   // ticked by hand
$("onnx-all").onclick = () => tickWeights(() => true);
$("onnx-none").onclick = () => tickWeights(() => false);
$("onnx-head").onclick = () => tickWeights((p) => p.layer === 1);
$("onnx-last").onclick = () => guarded(null, async () => {
  const n = parseInt($("onnx-last-n").value, 10);
  const layers = app.onnxUpload.layers;
  if (!(n >= 1 && n <= layers)) throw new Error(`Last N layers: give N from 1 to ${layers}.`);
  tickWeights((p) => p.layer <= n, n);
}, $("onnx-last"));

$("onnx-file").onchange = () => guarded(null, async () => {
  hideError();   // a new file: the previous one's error no longer applies
  clearOnnx();
  // the .onnx, plus the files uploaded with it (its .onnx.data external data), by file name
  const chosen = await readFiles($("onnx-file"));
  if (!chosen.length) return;
  const main = chosen.find((f) => /\.onnx$/i.test(f.name)) || chosen[0];
  const extraFiles = {};
  for (const f of chosen) if (f !== main) extraFiles[f.name] = new Uint8Array(f.data);
  const file = { name: main.name, bytes: new Uint8Array(main.data), extraFiles };
  // refused here, naming them, when the model uses ops pytrain cannot run: nothing is offered for it
  const info = await client.call("inspectModel", { bytes: file.bytes.slice(), name: file.name, extraFiles });
  const ins = info.inputs.map((i) => `${i.name} [${i.shape.map((d) => d === null ? "?" : d).join(", ")}]`).join(", ");
  const outs = info.outputs.map((o) => o.name).join(", ");
  // only what pytrain.trainable's rule calls a weight can train; the rest is listed with why
  const weights = info.params.filter((p) => p.trains);
  const fixed = info.params.filter((p) => !p.trains);
  app.onnxUpload = Object.assign(file, { params: weights, layers: info.layers });
  $("onnx-info").textContent = `${file.name}: ${info.nodes} nodes (${info.ops.join(", ")}); input ${ins}; output ${outs}. ` +
    `Its ${weights.length} weights, in ${info.layers} layers (ticked: trains):`;
  for (const p of weights) {
    const label = document.createElement("label");
    label.innerHTML = `<input type="checkbox" checked> <span></span>`;
    label.querySelector("input").value = p.name;
    label.querySelector("span").textContent = `${p.name} [${p.shape.join("×")}]`;
    label.title = p.why;
    $("onnx-params").appendChild(label);
  }
  for (const p of fixed) {
    const li = document.createElement("li");
    li.textContent = `${p.name} [${p.shape.join("×")}]: ${p.why}`;
    $("onnx-fixed").querySelector("ul").appendChild(li);
  }
  $("onnx-fixed").querySelector("summary").textContent = `Not trainable: ${fixed.length} other tensors (why)`;
  $("onnx-last-n").max = String(Math.max(1, info.layers));
  $("onnx-presets").hidden = !weights.length;
  $("onnx-count").hidden = false;
  $("onnx-fixed").hidden = !fixed.length;
  countTrainable();
}, $("onnx-file"));
$("onnx-generate").onclick = () => guarded($("onnx-generate"), async () => {
  const file = app.onnxUpload;
  const ticked = Array.from($("onnx-params").querySelectorAll("input:checked")).map((i) => i.value);
  if (!ticked.length) throw new Error("Tick at least one weight to train (\"Everything\" ticks them all).");
  // "Last N layers" as the generator counts them (trainable_ops); else the weights ticked
  const trainableOps = file.lastN || null;
  const requiresGrad = trainableOps ? null : ticked;
  const loss = $("onnx-loss").value;
  const batchnorm = $("onnx-batchnorm").value;
  // LoRA: adapters beside the attention's weights train instead (the ticks then do not apply)
  const rank = parseInt($("onnx-lora-rank").value, 10);
  if ($("onnx-lora").checked && !(rank >= 1)) throw new Error("LoRA rank: give a whole number of at least 1.");
  const lora = $("onnx-lora").checked ? { rank, alpha: 2 * rank } : null;
  setStatus("setup-status", "Generating training artifacts…");
  app.rebuild = async (optimizer) => {
    setModel(await client.call("generate",
      { bytes: file.bytes.slice(), loss, optimizer, requiresGrad: lora ? null : requiresGrad, trainableOps: lora ? null : trainableOps,
        name: file.name, extraFiles: file.extraFiles, batchnorm, lora }));
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
  if (res.data && res.data.loaded) setData(res.data);
  setModel(res.model);
  app.step = res.step; app.epoch = res.epoch;   // with the model, before any await: one state, never step 0
  await emit("runBack", res.model);   // a "By example" run: its classes and examples back in the gallery
  emit("history", res.history);
  emit("settings", { epochs: res.epochs, batchSize: res.batch_size, learningRate: res.lr });
  const took = Object.entries(res.files).filter(([, what]) => !/run file/.test(what))
    .map(([name, what]) => `${name.split("!").pop()}: ${what.split(" (")[0]}`).join(", ");
  setStatus("train-status", (res.step ? `Taken back at epoch ${res.epoch}, step ${nf.format(res.step)}. ` : "Ready to train. ") +
    `Recognised ${took}.`);
  refreshButtons();
  if (res.step) emit("trained");
});
let modelCSV = null;
$("data-csv-file").onchange = () => guarded(null, async () => {
  modelCSV = null;
  modelCSV = await inspectInto($("data-csv-file"), $("data-csv-label"), null);
}, $("data-csv-file"));
$("data-csv-label").onchange = refreshButtons;
$("data-csv-load").onclick = () => guarded($("data-csv-load"), async () => {
  if (!modelCSV) throw new Error("Choose a CSV file first.");
  setData(await client.call("useCSV", { text: modelCSV.text, label: $("data-csv-label").value, task: $("data-csv-task").value || null }));
  await applyScaling();
});
for (const id of ["data-images", "data-folder"]) $(id).onchange = refreshButtons;
$("data-images-load").onclick = () => guarded($("data-images-load"), async () => {
  const files = (await readFiles($("data-images"))).concat(await readFiles($("data-folder")))
    .filter((f) => /\.(png|jpe?g|gif|bmp|webp)$/i.test(f.name));
  if (!files.length) throw new Error("No image files (png, jpg, gif, bmp, webp) were chosen.");
  setStatus("setup-status", `Decoding ${files.length} images…`);
  setData(await client.call("useImages", { files }, files.map((f) => f.data)));
});
