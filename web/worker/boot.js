/* Boot: Pyodide's start with every other download overlapping it (numpy's .data, pytrain's zip,
 * the bytecode bundle written before CPython starts), the loading bar's byte-level progress, the
 * WebAssembly kernels linked into Pyodide's heap, then pytrain's Session (see worker/bridge.js). */
"use strict";

/** What the boot made: the site's config.json, the Pyodide instance and the threads products run on. */
const runtime = { config: null, pyodide: null, threads: 1 };

/* Byte-level progress over the files Pyodide fetches. Pyodide 0.17 exposes no progress hook
 * for its runtime, so fetch and XMLHttpRequest are wrapped while it loads. */
/* The bar's shares: the downloads, then each later step's share, credited when the step begins. */
const BYTES_SHARE = 0.6;
const STEP_SHARES = { "Starting Python": 0.12, "Loading numpy": 0.1, "Installing pytrain": 0.06,
                      "Starting pytrain": 0.02, "kernels linked": 0.05, "session made": 0.03 };

const progress = {
  files: new Map(),   // absolute URL -> {size, loaded, done}
  stage: "Starting",
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
  mark(name) { this.marks[name] = Math.round(performance.now()); this.report(true); },   // a finer step inside a stage
  setStage(stage) {
    this.marks[stage] = Math.round(performance.now());
    this.stage = stage; this.report(true);
  },
  fraction() {
    let total = 0, loaded = 0;
    for (const f of this.files.values()) { total += f.size; loaded += f.loaded; }
    const bytes = total ? loaded / total : 0;
    if (this.stage === "Ready") return 1;
    // Downloads fill the first part; the steps after them (measured on a second visit, bench/RESULTS.md
    // "Start-up": CPython's start ~0.6 s, numpy ~0.3 s, pytrain's import and kernels ~0.2 s) the rest,
    // so the bar keeps moving while nothing downloads.
    let steps = 0;
    for (const name of Object.keys(this.marks)) steps += STEP_SHARES[name] || 0;
    return Math.min(1, BYTES_SHARE * bytes + steps);
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

const KERNELS = { helper: "kernels/threads-worker.js", team: "kernels/threads-team.js" };
// A cross-origin isolated page (COOP/COEP, docs/web.md) has SharedArrayBuffer: big products
// are then split across helper threads (kernels.js startThreads), one per other core.
const KERNEL_THREADS = self.crossOriginIsolated && (self.navigator.hardwareConcurrency || 1) > 1;

/* The kernels' files fetched while Python starts, not one round trip after another once it has:
 * the two .wasm as bytes; the scripts only fetched (the service worker's cache then has them).
 * kernels.js (one of worker.js's rooms) picks the build: the FMA pair where the browser has relaxed SIMD. */
function prefetchKernels() {
  const warm = (rel) => fetch(BASE + rel).then((r) => r.arrayBuffer()).catch(() => null);
  if (KERNEL_THREADS) { warm(KERNELS.helper); warm(KERNELS.team); }   // (kernels.js imports the team's script)
  const build = self.pytrainKernels.kernelBuild();
  const files = { name: build.name, wasm: "kernels/" + build.wasm, shared: "kernels/" + build.shared };
  return { files, wasm: prefetch(BASE + files.wasm), shared: KERNEL_THREADS ? prefetch(BASE + files.shared) : null };
}

/* Link the WebAssembly SIMD kernels (kernels/kernels.wasm or kernels-fma.wasm: the GEMM and the other kernels
 * of web/kernels/*.c) into Pyodide's heap and route pytrain's ops through them (pytrain.ops.wasm);
 * numpy's own kernels stay the fallback when that is not possible. */
async function installWasmKernels(pyodide, early) {
  try {
    // (a failed prefetch: kernels.js fetches the file itself)
    const bytes = (p, rel) => (p ? p.catch(() => BASE + rel) : BASE + rel);
    const threads = KERNEL_THREADS
      ? { source: await bytes(early.shared, early.files.shared), workerURL: BASE + KERNELS.helper,
          count: self.navigator.hardwareConcurrency }
      : null;
    const gemm = await self.pytrainKernels.registerWithPyodide(pyodide, await bytes(early.wasm, early.files.wasm), undefined,
                                                                threads);
    runtime.threads = gemm.threads ? gemm.threads.count : 1;
    progress.mark("kernels loaded");
    if (pyodide.runPython("from pytrain.ops import wasm\nwasm.install()")) return early.files.name;
  } catch (err) {
    console.warn("pytrain: the wasm kernels are unavailable, numpy does the work:", err);
  }
  return "numpy";
}

/* The WebGPU device (gpu/webgpu.js), by the user's choice (worker.js?gpu=: "1" on, "0" off, absent auto):
 * "auto" takes a hardware adapter and leaves a software one (SwiftShader) alone, slower than the wasm
 * kernels; "on" takes any adapter; "off" none. A device taken is registered as Python's pytrain_webgpu, so
 * the session's slices train there (pytrain/webapp/gpu_slices.py). runtime.device says what trains, for the
 * page: "GPU: <adapter>" or "CPU, N threads", with runtime.deviceReason saying why not the GPU. */
function gpuModeFromURL() {
  const v = new URL(self.location.href).searchParams.get("gpu");
  return v === "1" ? "on" : v === "0" ? "off" : "auto";
}

async function installWebGPU(pyodide, mode) {
  runtime.gpuMode = mode;
  runtime.deviceReason = "";
  if (mode !== "off" && !runtime.gpu) {
    try {
      if (!self.PytrainGPU) self.importScripts(BASE + "gpu/webgpu.js", BASE + "gpu/shaders_nn.js", BASE + "gpu/shaders_text.js");
      const gpu = await self.PytrainGPU.create(() => pyodide._module.HEAPU8, { software: mode === "on" });
      if (gpu) {
        gpu.registerWithPyodide(pyodide);
        runtime.gpu = gpu;
      } else runtime.deviceReason = self.PytrainGPU.reason;
    } catch (err) {
      console.warn("pytrain: no WebGPU device, the CPU trains:", err);
      runtime.deviceReason = String(err.message || err);
    }
  }
  const use = !!runtime.gpu && mode !== "off" && !runtime.gpu.lost && (mode === "on" || !runtime.gpu.software);
  if (mode === "off") runtime.deviceReason = "the GPU is turned off";
  else if (runtime.gpu && runtime.gpu.lost) runtime.deviceReason = "the GPU device was lost: " + runtime.gpu.lost;
  else if (runtime.gpu && !use) runtime.deviceReason = "the adapter (" + runtime.gpu.name + ") is a software one";
  runtime.gpuLost = null;
  if (runtime.gpu) pyodide.runPython("from pytrain.ops import webgpu\nwebgpu.use(" + (use ? "True" : "False") + ")");
  return describeDevice(use);
}

/** What trains: {device: "GPU: <adapter>" | "CPU, N threads", mode, reason: why not the GPU ("" when it trains)}. */
function describeDevice(gpu) {
  const cpu = "CPU, " + (runtime.threads || 1) + (runtime.threads > 1 ? " threads" : " thread");
  runtime.device = gpu ? "GPU: " + runtime.gpu.name : cpu;
  return { device: runtime.device, mode: runtime.gpuMode, reason: gpu ? "" : runtime.deviceReason };
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

/* Write a file bundle of the site (buildsite/bytecode.py file_bundle) into Pyodide's file system:
 * the stdlib and numpy modules the start imports, precompiled for Python 3.8 by build.py
 * (build_startup_bytecode): unchecked-hash .pyc files written in place of their sources, which
 * the site leaves out (config.bytecode.sourceless; else into __pycache__ beside them), so
 * importing numpy unmarshals them instead of compiling every .py on every visit; and after the
 * first step, the rest of the stdlib (config.bytecode.rest, worker/data.js loadStdlibRest). */
function writeBundle(FS, bundle) {
  const magic = new TextDecoder().decode(bundle.subarray(0, 8));
  if (magic !== "PTPYC001") throw new Error("a file bundle of the site has an unknown format");
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
 * most, and what the loading bar should show as a step of its own. So: when loadPyodide imports
 * pyodide.asm.js, wrap the emscripten factory it defines to add a preRun step that marks the step
 * and writes the bundle, if any (a run dependency holds CPython's start until it is written),
 * then calls started() once the bundle is in (Pyodide's own downloads are then over or nearly).
 * Anything unexpected leaves Pyodide untouched: it then compiles the sources itself (a site built
 * sourceless, config.bytecode.sourceless, then fails to start Python: it is built for Pyodide 0.17.1). */
function beforePythonStarts(bundle, sourceless, failed, started, wasm) {
  const importScripts = self.importScripts;
  self.importScripts = function (...urls) {
    const asm = urls.some((u) => /pyodide\.asm\.js$/.test(u));
    if (asm) progress.mark("pyodide.asm.js asked");
    importScripts.apply(self, urls);
    const create = self._createPyodideModule;
    if (!asm || typeof create !== "function") return;
    progress.mark("pyodide.asm.js run");
    self._createPyodideModule = function (Module) {
      if (wasm) Module.instantiateWasm = (imports, receive) => instantiateEarly(wasm, imports, receive);
      Module.preRun = [].concat(Module.preRun || [], () => {
        progress.setStage("Starting Python");
        (bundle || Promise.resolve()).catch(() => {}).then(started);
        if (!bundle) return;
        Module.addRunDependency("pytrain-bytecode");
        bundle.then((bytes) => writeBundle(Module.FS, new Uint8Array(bytes)))
          .catch((e) => {
            // without their sources, Python cannot start: loadRuntime reports this, not CPython's own failure
            if (sourceless) failed.error = e;
            else console.warn("pytrain: no precompiled bytecode, Python compiles its sources:", e);
          })
          .finally(() => Module.removeRunDependency("pytrain-bytecode"));
      });
      self._createPyodideModule = create;
      return create(Module);
    };
  };
  return () => { self.importScripts = importScripts; };
}

/* Pyodide's 11 MB pyodide.asm.wasm compiled from the start of the worker, while pyodide.js, packages.json and
 * pyodide.asm.js (1.7 MB of JS) are fetched and run, instead of after them: its fetch and compile overlap
 * theirs. Streaming from the browser's own Response (the service worker's cached one on a later visit),
 * as Pyodide's own instantiateStreaming would, so Chromium can keep and reuse its compiled code. */
function compileEarly(url) {
  if (typeof WebAssembly.compileStreaming !== "function") return null;
  const p = WebAssembly.compileStreaming(fetch(url));
  p.catch(() => {});
  let fail = null;
  const failure = new Promise((resolve, reject) => { fail = reject; });
  failure.catch(() => {});
  return { url, module: p, failure, fail };   // failure: rejects when neither way instantiates (loadRuntime races it)
}

/* emscripten's Module.instantiateWasm hook: instantiate the early-compiled module; if that compile
 * failed (e.g. a server that does not send application/wasm), the bytes fetched again and instantiated, as
 * Pyodide's own fallback does. */
function instantiateEarly(wasm, imports, receive) {
  wasm.module
    .then((module) => WebAssembly.instantiate(module, imports).then((instance) => ({ instance, module })))
    .catch((e) => {
      console.warn("pytrain: the early-compiled Pyodide wasm did not instantiate, fetching it again:", e);
      return fetch(wasm.url, { credentials: "same-origin" }).then((r) => {
        if (!r.ok) throw new Error(`${wasm.url}: HTTP ${r.status}`);
        return r.arrayBuffer();
      }).then((bytes) => WebAssembly.instantiate(bytes, imports));
    })
    .then(({ instance, module }) => { progress.mark("wasm instantiated"); receive(instance, module); },
          (e) => wasm.fail(new Error("Pyodide's WebAssembly did not start: " + (e.message || e))));
  return {};   // (emscripten: instantiation is asynchronous, receive() completes it)
}

async function loadRuntime() {
  progress.setStage("Loading the Python runtime");
  const resp = await fetch(BASE + "config.json", { cache: "no-cache" });
  if (!resp.ok) throw new Error(`config.json: HTTP ${resp.status}`);
  const config = await resp.json();
  runtime.config = config;
  const indexURL = new URL(config.pyodide.indexURL, BASE).href;
  for (const f of config.pyodide.files || []) progress.register(new URL(f.name, indexURL).href, f.size);
  // pytrain's modules as one zip imported in place (zipimport): compiled for Python 3.8 when the
  // build could (python.zip), else the wheel's sources. No micropip, no unpacking.
  const pyZip = config.python || { zip: config.wheel, size: config.wheelSize };
  const zipURL = new URL(pyZip.zip, BASE).href;
  progress.register(zipURL, pyZip.size || 300000);
  const untrack = trackDownloads();
  const wasm = compileEarly(indexURL + "pyodide.asm.wasm");   // (tracked: the bar counts its bytes)
  let pyodide = null;
  try {
    // Pyodide's own start (its downloads, compiling its wasm, starting CPython) is the floor. What
    // Python needs only once it runs (numpy's .data, which goes to its loader through
    // getPreloadedPackage, pytrain's zip) downloads while CPython starts, not sharing the network
    // with Pyodide's own files; then the page's digits (worker.js?prefetch=digits, worker/data.js),
    // while numpy and pytrain are imported.
    const packages = config.pyodide.packages || ["numpy"];
    const bytecode = config.bytecode ? prefetch(new URL(config.bytecode.file, BASE).href) : null;
    const kernels = prefetchKernels();
    let later = null;
    const startLater = () => {
      if (later) return later;
      later = { packages: new Map(packages.map((name) => [indexURL + name + ".data", prefetch(indexURL + name + ".data")])),
                zip: prefetch(zipURL) };
      if (new URL(self.location.href).searchParams.get("prefetch") === "digits") {
        Promise.all([...later.packages.values(), later.zip]).catch(() => {}).then(() => prefetchSiteData());
      }
      return later;
    };
    const bundleFailed = { error: null };
    const unhook = beforePythonStarts(bytecode, !!(config.bytecode && config.bytecode.sourceless), bundleFailed,
                                      startLater, wasm);
    try {
      self.importScripts(indexURL + "pyodide.js");
      progress.mark("pyodide.js run");
      const started = self.loadPyodide({ indexURL });
      pyodide = await (wasm ? Promise.race([started, wasm.failure]) : started);
      runtime.pyodide = pyodide;
    } catch (e) {
      if (bundleFailed.error) throw new Error("the precompiled Python modules did not load: " + bundleFailed.error.message);
      throw e;
    } finally {
      unhook();
    }
    guardStdlibRest(pyodide);   // (before any Python but Pyodide's own start runs)
    progress.setStage("Loading numpy");
    const fetched = new Map();
    const { packages: early, zip: zipBytes } = startLater();   // (started already, unless the hook missed)
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
    const gemm = await installWasmKernels(pyodide, kernels);
    progress.mark("kernels linked");
    const trainsOn = await installWebGPU(pyodide, gpuModeFromURL());
    progress.mark("device chosen");
    pyodide.runPython(
      "from pytrain import webapp as _pt_webapp\n" +
      "_pt_session = _pt_webapp.Session()\n" +
      "def _pt_call(method, args_json, blobs):\n" +
      "    return _pt_webapp.call(_pt_session, method, args_json, blobs)\n");
    progress.mark("session made");
    connectPython(pyodide.globals.get("_pt_call"));
    const versions = JSON.parse(pyodide.runPython(
      "import json, sys, numpy, pytrain\n" +
      "json.dumps({'python': sys.version.split()[0], 'numpy': numpy.__version__, 'pytrain': pytrain.__version__})"));
    // Pyodide 0.17.1's runtime still reports "0.17.0"; the distribution's folder names the real one.
    const dist = /pyodide\/(\d+\.\d+\.\d+[^/]*)\/$/.exec(config.pyodide.indexURL || "");
    versions.pyodide = dist ? dist[1] : pyodide.version;
    versions.gemm = gemm;
    versions.threads = runtime.threads;   // threads the big products run on (kernels.js startThreads)
    versions.device = trainsOn.device;    // "GPU: <adapter>" or "CPU, N threads" (installWebGPU)
    versions.gpu = trainsOn;              // {device, mode: "auto" | "on" | "off", reason: why not the GPU}
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
