// "By example" (like Teachable Machine): name classes, add pictures of each from the camera (hold to
// record), from files or from the drawing pad (examples_pad.js), see them per class (delete any), and a small CNN learns them in the tab;
// or, with a pretrained backbone the user brings (ONNX), only a new head trains on its features.

import { $, describeSetup, guarded, nf, refreshButtons, setStatus } from "./ui.js";
import { app, client, on, setData, setModel } from "./store.js";
import { SHAPE, cameraIsOn, cameraOn, pixels, video } from "./images.js";
import { readFiles } from "./files.js";
import { initExamplesPad, padClasses } from "./examples_pad.js";

const KEEP = 224;                   // each example also keeps its picture up to this side, for a backbone's input size

/** An example from an image source: its SHAPE pixels, with the picture kept (`.source`) for a backbone. */
function sample(source) {
  const w = source.videoWidth || source.width, h = source.videoHeight || source.height;
  const k = Math.min(1, KEEP / Math.max(w, h, 1));
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, Math.round(w * k)); canvas.height = Math.max(1, Math.round(h * k));
  canvas.getContext("2d").drawImage(source, 0, 0, canvas.width, canvas.height);
  const x = pixels(canvas);
  x.source = canvas;
  return x;
}

function thumb(x) {
  const [, h, w] = SHAPE;
  const canvas = document.createElement("canvas");
  canvas.width = w; canvas.height = h;
  const img = canvas.getContext("2d").createImageData(w, h);
  for (let p = 0; p < h * w; p++) {
    img.data[4 * p] = x[p] * 255; img.data[4 * p + 1] = x[h * w + p] * 255; img.data[4 * p + 2] = x[2 * h * w + p] * 255;
    img.data[4 * p + 3] = 255;
  }
  canvas.getContext("2d").putImageData(img, 0, 0);
  return canvas;
}

// ------------------------------------------------------------------ classes and their examples

app.examples = [];   // [{name, items: [Float32Array]}]

function renderClasses() {
  const box = $("ex-classes");
  box.innerHTML = "";
  app.examples.forEach((cls, i) => {
    const fs = document.createElement("fieldset");
    fs.className = "ex-class";
    const legend = document.createElement("legend");
    const name = document.createElement("input");
    name.value = cls.name;
    name.setAttribute("aria-label", `Name of class ${i + 1}`);
    name.onchange = () => { cls.name = name.value.trim() || `Class ${i + 1}`; padClasses(app.examples.map((c) => c.name)); };
    legend.appendChild(name);
    const rec = document.createElement("button");
    rec.type = "button";
    rec.className = "ex-record";
    rec.textContent = "Hold to record";
    rec.title = "Hold (mouse, finger, or Space/Enter) to add camera frames to this class";
    holdToRecord(rec, i);
    const files = document.createElement("input");
    files.type = "file"; files.accept = "image/*"; files.multiple = true;
    files.setAttribute("aria-label", `Add picture files to ${cls.name}`);
    files.onchange = () => guarded(null, async () => {
      for (const f of Array.from(files.files)) {
        const bmp = await createImageBitmap(f).catch(() => { throw new Error(`${f.name}: not an image the browser can decode`); });
        cls.items.push(sample(bmp)); bmp.close();
      }
      files.value = "";
      renderClasses();
    }, files);
    const count = document.createElement("span");
    count.className = "ex-count";
    count.textContent = `${nf.format(cls.items.length)} example${cls.items.length === 1 ? "" : "s"}`;
    const gallery = document.createElement("div");
    gallery.className = "ex-gallery";
    cls.items.slice(-12).forEach((x, k) => {
      const idx = cls.items.length - Math.min(12, cls.items.length) + k;
      const item = document.createElement("span");
      item.className = "ex-item";
      const del = document.createElement("button");
      del.type = "button"; del.textContent = "×";
      del.setAttribute("aria-label", `Delete example ${idx + 1} of ${cls.name}`);
      del.onclick = () => { cls.items.splice(idx, 1); renderClasses(); };
      item.append(thumb(x), del);
      gallery.appendChild(item);
    });
    const row = document.createElement("div");
    row.className = "row";
    const fileLabel = document.createElement("label");
    fileLabel.className = "file";
    fileLabel.append("Add files ", files);
    row.append(rec, fileLabel, count);
    fs.append(legend, row, gallery);
    box.appendChild(fs);
  });
  padClasses(app.examples.map((c) => c.name));
  const total = app.examples.reduce((a, c) => a + c.items.length, 0);
  const ready = app.examples.filter((c) => c.items.length >= 2).length >= 2;
  $("ex-build").disabled = !app.ready || app.training || !ready;
  $("ex-info").textContent = ready ? `${nf.format(total)} examples in ${app.examples.length} classes.` +
    (app.backbone ? ` Build: a head on ${app.backbone.name}.` : " Build: a small CNN from scratch.")
    : "Add at least two examples to at least two classes.";
  $("ex-backbone-clear").disabled = !app.backbone;
}

function holdToRecord(button, i) {
  let timer = null;
  const grab = () => { if (cameraIsOn()) { app.examples[i].items.push(sample(video)); updateCount(i); } };
  const start = async (e) => {
    e.preventDefault();
    if (timer) return;
    try { await cameraOn(); } catch (err) { guarded(null, () => { throw err; }, button); return; }
    grab();
    timer = setInterval(grab, 100);
  };
  const stop = () => { if (timer) { clearInterval(timer); timer = null; renderClasses(); } };
  button.addEventListener("pointerdown", start);
  for (const t of ["pointerup", "pointerleave", "pointercancel"]) button.addEventListener(t, stop);
  button.addEventListener("keydown", (e) => { if (e.key === " " || e.key === "Enter") { e.preventDefault(); cameraOn().then(grab).catch(() => {}); } });
  button.addEventListener("keyup", (e) => { if (e.key === " " || e.key === "Enter") renderClasses(); });
}

function updateCount(i) {
  const el = $("ex-classes").querySelectorAll(".ex-count")[i];
  if (el) el.textContent = `${nf.format(app.examples[i].items.length)} examples (recording…)`;
}

function initExamples() {
  app.examples = [{ name: "Class 1", items: [] }, { name: "Class 2", items: [] }];
  renderClasses();
  $("cam-start").onclick = () => guarded(null, cameraOn, $("cam-start"));
  $("ex-add-class").onclick = () => { app.examples.push({ name: `Class ${app.examples.length + 1}`, items: [] }); renderClasses(); };
  initBackbone();
  initExamplesPad((i, canvas) => { app.examples[i].items.push(sample(canvas)); renderClasses(); });
  $("ex-build").onclick = () => guarded($("ex-build"), async () => {
    const used = app.examples.filter((c) => c.items.length);
    const n = used.reduce((a, c) => a + c.items.length, 0);
    const bb = app.backbone;
    const shape = bb ? bb.info.shape : SHAPE;    // a backbone gets the pictures at its own input size
    const size = shape[0] * shape[1] * shape[2];
    const x = new Float32Array(n * size);
    const y = new Int32Array(n);
    let k = 0;
    used.forEach((c, ci) => c.items.forEach((item) => {
      x.set(bb ? pixels(item.source || thumb(item), shape) : item, k * size); y[k] = ci; k++;
    }));
    setStatus("setup-status", bb ? `Computing each example's features with ${bb.name} (once), then building the head…`
      : "Building a small CNN for your examples…");
    setData(await client.call("useArrays", { x, shape: [n].concat(shape), y, task: "classification", classes: used.map((c) => c.name) }));
    const backbone = bb && { bytes: bb.bytes, name: bb.name, extraFiles: bb.extraFiles, size: bb.info.shape[1], normalize: bb.normalize,
                             info: bb.restored ? bb.info : undefined };   // a restored extractor is used as it is
    app.rebuild = async (optimizer) => setModel(await client.call("buildCNN", { optimizer, backbone }));
    await app.rebuild($("optimizer").value);
    refreshButtons();
    $("train").scrollIntoView({ block: "start" });   // the tab is long: Start is the next step
    if (!$("start").disabled) $("start").focus({ preventScroll: true });
  });
  client.on("ready", renderClasses);
  client.on("state", renderClasses);
}

// ------------------------------------------------------------------ a run that came back

/** A canvas holding float32 pixels [C, H, W] in [0, 1] (C = 1: grey), as `pixels` reads them back. */
function canvasOf(x, [c, h, w]) {
  const canvas = document.createElement("canvas");
  canvas.width = w; canvas.height = h;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(w, h);
  for (let p = 0; p < h * w; p++) {
    for (let k = 0; k < 3; k++) img.data[4 * p + k] = x[(c === 1 ? 0 : k) * h * w + p] * 255;
    img.data[4 * p + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

/** After a run came back (resumed from this browser, or its run file taken back): its classes,
 * their examples (from the pixels it trains on) and its backbone go into the gallery, so what the
 * page shows is what trains, and Build, adds and deletes work on it as in the session that made it. */
async function restoreExamples(model) {
  if (!model || (model.origin !== "cnn" && model.origin !== "backbone")) return;
  const ex = await client.call("examples");
  if (!ex.loaded || ex.task !== "classification") return;
  const [n, ...shape] = ex.shape;
  const size = shape.reduce((a, b) => a * b, 1);
  const all = new Float32Array(ex.x.buffer, ex.x.byteOffset, n * size);
  const same = shape.length === 3 && shape.every((s, i) => s === SHAPE[i]);
  app.examples = ex.classes.map((name) => ({ name, items: [] }));
  for (let i = 0; i < n; i++) {
    const row = all.slice(i * size, (i + 1) * size);
    let item = row;
    if (ex.backbone || !same) {   // keep the picture at the size it was trained at, for the backbone
      const canvas = canvasOf(row, shape);
      item = same ? row : pixels(canvas);
      item.source = canvas;
    }
    app.examples[ex.y[i]].items.push(item);
  }
  if (ex.backbone) {
    const info = ex.backbone_info;
    app.backbone = { name: info.name, bytes: ex.backbone, extraFiles: {}, normalize: info.normalize, info, restored: true };
    $("ex-backbone").value = "";
    const sel = $("ex-backbone-size"), norm = $("ex-backbone-norm"), side = String(info.shape[1]);
    if (!Array.from(sel.options).some((o) => o.value === side)) sel.add(new Option(side, side));
    sel.value = side;
    sel.disabled = true;
    norm.value = info.normalize;
    norm.disabled = true;   // built into the saved extractor
    norm.title = sel.title = "as the run was trained: choose the backbone file again to change it";
    $("ex-backbone-info").textContent = `${info.name}, restored with the run: ${nf.format(info.params)} parameters, ` +
      `frozen; it sees ${info.shape.join("×")} pictures given as ${info.normalization} and gives ` +
      `${nf.format(info.features)} features. Choose the backbone file again to change its size or normalisation.`;
  } else if (app.backbone) clearBackbone();
  renderClasses();
}

// ------------------------------------------------------------------ a pretrained backbone (optional)

app.backbone = null;   // {name, bytes, extraFiles, normalize, info} of the chosen feature extractor
                       // (restored: true when the bytes are a restored run's extractor, used as they are)

async function inspectBackbone(file) {
  const normalize = $("ex-backbone-norm").value;
  const size = parseInt($("ex-backbone-size").value, 10);
  $("ex-backbone-info").textContent = `Checking ${file.name} (one test picture through it)…`;
  const info = await client.call("inspectBackbone", { bytes: file.bytes, name: file.name, extraFiles: file.extraFiles, size, normalize });
  app.backbone = Object.assign({}, file, { normalize, info });
  $("ex-backbone-norm").disabled = false;
  $("ex-backbone-norm").title = "";
  const sel = $("ex-backbone-size");
  sel.disabled = !info.open_size;
  if (!info.open_size) {   // show the size the backbone is fixed at
    const side = String(info.shape[1]);
    if (!Array.from(sel.options).some((o) => o.value === side)) sel.add(new Option(side, side));
    sel.value = side;
  }
  sel.title = info.open_size ? "the backbone takes pictures of any size: choose the side they are resized to"
    : `the backbone takes ${info.shape[1]}×${info.shape[2]} pictures`;
  $("ex-backbone-info").textContent = `${file.name}: ${info.nodes} nodes, ${nf.format(info.params)} parameters, frozen ` +
    `(BatchNorm on running statistics, Dropout off). It sees ${info.shape.join("×")} pictures` +
    `${info.open_size ? " (size chosen here: the model takes any)" : ""} given as ${info.normalization}, and gives ` +
    `${nf.format(info.features)} features${info.pooled ? " (its feature map averaged)" : ""}. Only a new head ` +
    `(${nf.format(info.features)} × classes + classes parameters) trains.`;
  renderClasses();
}

function clearBackbone() {
  app.backbone = null;
  $("ex-backbone").value = "";
  $("ex-backbone-size").disabled = true;
  $("ex-backbone-norm").disabled = false;
  $("ex-backbone-norm").title = "";
  $("ex-backbone-info").textContent = "No backbone: a small CNN from scratch.";
  renderClasses();
}

function initBackbone() {
  const input = $("ex-backbone");
  input.onchange = () => guarded(null, async () => {
    app.backbone = null;
    $("ex-backbone-info").textContent = "";
    const chosen = await readFiles(input);
    if (!chosen.length) { clearBackbone(); return; }
    const main = chosen.find((f) => /\.onnx$/i.test(f.name)) || chosen[0];
    const extraFiles = {};   // its .onnx.data external data, by file name (as "Your model" takes it)
    for (const f of chosen) if (f !== main) extraFiles[f.name] = new Uint8Array(f.data);
    try {
      await inspectBackbone({ name: main.name, bytes: new Uint8Array(main.data), extraFiles });
    } catch (e) { clearBackbone(); throw e; }
  }, input);
  for (const id of ["ex-backbone-size", "ex-backbone-norm"]) {
    $(id).onchange = () => guarded(null, async () => {
      if (!app.backbone) return;
      const { name, bytes, extraFiles } = app.backbone;
      try { await inspectBackbone({ name, bytes, extraFiles }); } catch (e) { clearBackbone(); throw e; }
    }, $(id));
  }
  $("ex-backbone-clear").onclick = () => guarded(null, async () => { clearBackbone(); describeSetup(); }, $("ex-backbone-clear"));
}

initExamples();
on("runBack", restoreExamples);
