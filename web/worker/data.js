/* Data and artifacts from the site (the digits, the prebuilt demo artifacts) and uploaded images
 * decoded to float32 [N, C, H, W] (no Pillow in the browser). */
"use strict";

let digitsBlob = null;      // the MNIST binary, once fetched
let digitsWhole = null;     // Promise<Uint8Array> of it, fetched once
let digitsLoading = false;  // Python's data is the digits' first part (config.mnist.first): the whole file completes it
let digitsMerge = null;     // the merge under way (completeDigits)
const prefetched = new Map();   // absolute URL -> Promise<Uint8Array> started by prefetchSiteData, taken once

async function download(url) {
  const resp = await fetch(new URL(url, BASE).href);
  if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
  return new Uint8Array(await resp.arrayBuffer());
}

/* A site file's bytes: the prefetched ones when prefetchSiteData started it (taken once: the
 * caller may transfer the buffer), else a download now (also when the prefetch failed). */
async function fetchBytes(url) {
  const abs = new URL(url, BASE).href;
  const early = prefetched.get(abs);
  if (!early) return download(url);
  prefetched.delete(abs);
  return early.catch(() => download(url));
}

/* Start downloading what the page's first training run needs, the digits' first part (or the whole
 * file when the site has no part) and the default (first-listed) digits model's artifacts: called by
 * the boot once Pyodide's own files are in, so these bytes arrive while CPython and numpy start (CPU
 * work) instead of after "ready". The whole digits file waits for the first step (loadRest): on a
 * slow network it would share the bandwidth with Pyodide's and numpy's files, which the step waits for. */
function prefetchSiteData() {
  const config = runtime.config || {};
  const mnist = config.mnist || {};
  const urls = [(mnist.first || mnist).file].concat(Object.values((config.artifacts || {})["digits-mlp"] || {}));
  for (const url of urls) {
    if (!url || prefetched.has(new URL(url, BASE).href)) continue;
    const p = download(url);
    p.catch(() => {});   // (reported, if it matters, when fetchBytes downloads it again)
    prefetched.set(new URL(url, BASE).href, p);
  }
}

/** True for the digits' buffer, which stays here (never transferred to the page). */
function isDigitsBuffer(buffer) { return !!digitsBlob && buffer === digitsBlob.buffer; }

/** The whole digits file. */
function getDigits() {
  if (!digitsWhole) {
    digitsWhole = fetchBytes(runtime.config.mnist.file).then((blob) => { digitsBlob = blob; return blob; });
    digitsWhole.catch(() => { digitsWhole = null; });   // a later call tries again
  }
  return digitsWhole;
}

/* The digits a new run loads (Session.use_digits): their first part when the site has one (its first
 * batches train at once; the whole file, fetched after the first step or by the first command that
 * needs it, completes it: completeDigits), else the whole file. */
async function digitsArgs(nTrain, nVal) {
  const first = runtime.config.mnist.first;
  if (!first) return { blob: await getDigits(), n_train: nTrain, n_val: nVal };
  return { blob: await fetchBytes(first.file), n_train: nTrain, n_val: nVal };
}

/** Note what a use_digits call answered: whether the data waits for the rest of the digits. */
function digitsLoaded(summary) {
  digitsLoading = !!(summary && summary.loading);
  return summary;
}

/* Complete digits loaded from their first part with the whole file (a no-op in Python when nothing
 * waits): what training waits for before drawing past the part, and every command but the ones a run
 * starts with (COMMAND_TABLE's `onFirstPart`), so nothing else ever sees the part. */
function completeDigits() {
  if (!digitsLoading) return Promise.resolve();
  if (!digitsMerge) {
    digitsMerge = getDigits().then((blob) => {
      digitsMerge = null;
      digitsLoaded(py("use_digits", { blob, rest: true }));
    }, (e) => { digitsMerge = null; throw e; });
  }
  return digitsMerge;
}

/* After a run's first step: the rest of what the page loads, the whole digits (training draws past
 * their first part a few steps later) and then the stdlib's second part; failures are reported by
 * what waits for them (the training loop, completeFirstPart). */
function loadRest() {
  completeDigits().catch(() => {}).then(() => loadStdlibRest()).catch(() => {});
}

/* What every command but the ones a run starts with (COMMAND_TABLE's `onFirstPart`) waits for: the
 * whole digits and the stdlib's second part (the training loop waits for the digits alone). */
function completeFirstPart() {
  return Promise.all([completeDigits(), loadStdlibRest()]);
}

/* The stdlib's second part (config.bytecode.rest, buildsite/strip.py split_rest): what neither
 * Python's start nor the first training step imports, a file bundle fetched once that step is done
 * (or by the first command that waits for it: completeFirstPart) and written into Pyodide's file
 * system. Python's import guard (guardStdlibRest) covers an import of it before that. */
let restWritten = false;
let restLoading = null;     // Promise of the fetch and write under way

function stdlibRest() {
  return (runtime.config && runtime.config.bytecode && runtime.config.bytecode.rest) || null;
}

function writeStdlibRest(bytes) {
  writeBundle(runtime.pyodide._module.FS, new Uint8Array(bytes));
  restWritten = true;
}

/** Fetch and write the stdlib's second part, once (a failed fetch is tried again by the next call). */
function loadStdlibRest() {
  const rest = stdlibRest();
  if (!rest || restWritten) return Promise.resolve();
  if (!restLoading) {
    restLoading = fetchBytes(rest.file).then((bytes) => {
      restLoading = null;
      if (restWritten) return;   // (the guard wrote it meanwhile)
      writeStdlibRest(bytes);
      runtime.pyodide.runPython("_pt_rest_guard.written()");
    }, (e) => { restLoading = null; throw e; });
  }
  return restLoading;
}

/* The guard's way: an import cannot wait for a promise, so the import of a module of the second
 * part before it is written fetches it synchronously (allowed in a worker) and writes it at once. */
function fetchStdlibRestNow() {
  const rest = stdlibRest();
  if (restWritten) return;
  const xhr = new XMLHttpRequest();
  xhr.open("GET", new URL(rest.file, BASE).href, false);
  xhr.responseType = "arraybuffer";
  xhr.send();
  if (xhr.status !== 200) throw new Error(`${rest.file}: HTTP ${xhr.status}`);
  writeStdlibRest(xhr.response);
}

/* Python's import guard (first on sys.meta_path): a module of the second part imported before it is
 * written is written first (fetchStdlibRestNow), then imported as any other; `early` names the
 * modules that needed it (the default run's first step needs none: test_site_stdlib_rest.py). */
const STDLIB_REST_GUARD = `
import importlib, sys
class _PtRestGuard:
    def __init__(self, names, fetch):
        self.names, self.fetch, self.early = set(names), fetch, []
    def find_spec(self, name, path=None, target=None):
        if name in self.names:
            self.early.append(name)
            self.fetch()
            self.written()
        return None
    def written(self):
        self.names.clear()
        importlib.invalidate_caches()   # (the path finders' listings predate the new files)
_pt_rest_guard = _PtRestGuard(MODULES, _pt_rest_fetch)
sys.meta_path.insert(0, _pt_rest_guard)
del _pt_rest_fetch
`;

function guardStdlibRest(pyodide) {
  const rest = stdlibRest();
  if (!rest) return;
  pyodide.globals.set("_pt_rest_fetch", fetchStdlibRestNow);
  pyodide.runPython(STDLIB_REST_GUARD.replace("MODULES", JSON.stringify(rest.modules)));
}

async function prebuiltArtifacts(kind) {
  const entry = (runtime.config.artifacts || {})["digits-" + kind];
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
