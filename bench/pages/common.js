// Shared by every bench page; must be the first script so its hooks see every
// WebAssembly.Memory the runtimes create or export. Also runs inside a page's worker
// (importScripts), which then reports to the page (runInWorker).
"use strict";

(function () {
  // Each runtime hides its wasm memory differently (Pyodide in a closure, ORT
  // and TF.js in emscripten modules), so record every Memory at the source.
  const memories = new Set();
  const OrigMemory = WebAssembly.Memory;
  WebAssembly.Memory = new Proxy(OrigMemory, {
    construct(target, args) {
      const m = new target(...args);
      memories.add(m);
      return m;
    },
  });
  const recordExports = (instance) => {
    for (const v of Object.values(instance.exports || {})) if (v instanceof OrigMemory) memories.add(v);
  };
  const origInstantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = function (...args) {
    return origInstantiate.apply(this, args).then((r) => {
      recordExports(r.instance || r);
      return r;
    });
  };
  if (WebAssembly.instantiateStreaming) {
    const origStreaming = WebAssembly.instantiateStreaming;
    WebAssembly.instantiateStreaming = function (...args) {
      return origStreaming.apply(this, args).then((r) => {
        recordExports(r.instance);
        return r;
      });
    };
  }
  const OrigInstance = WebAssembly.Instance;
  WebAssembly.Instance = new Proxy(OrigInstance, {
    construct(target, args) {
      const inst = new target(...args);
      recordExports(inst);
      return inst;
    },
  });

  /** Bytes of all wasm memories seen so far (they never shrink, so this is the peak). */
  function wasmMemoryBytes() {
    let total = 0;
    for (const m of memories) total += m.buffer.byteLength;
    return total;
  }

  function params() {
    const q = new URLSearchParams(location.search);
    const get = (k, d) => (q.has(k) ? q.get(k) : d);
    return {
      workload: get("workload", "mlp"),
      warmup: Number(get("warmup", 20)),
      warmupMs: Number(get("warmup_ms", 0)),
      steps: Number(get("steps", 50)),
      threads: Number(get("threads", 1)),
      gemm: get("gemm", "0") === "1",
      kernels: get("kernels", ""),   // "plain" / "fma": which kernels build (kernels.js kernelBuild), absent the browser's
      gen: get("gen", "0") === "1",
      infer: get("infer", "0") === "1",  // inference of the workload's model.onnx instead of a training step
      profile: get("profile", "0") === "1",
      nodes: get("nodes", "0") === "1",
      base: get("base", "0") === "1",
      gcoff: get("gcoff", "0") === "1",
      kdir: get("kdir", ""),   // pytrain.js: bench/.cache/<kdir>/ holds the kernels to run (A/B of two checkouts)
      art: get("art", "pytrain"),   // pytrain.js: bench/.cache/art/<art>/<workload>/ holds the training artifacts
    };
  }

  async function fetchBytes(url) {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`fetch ${url}: ${r.status}`);
    return new Uint8Array(await r.arrayBuffer());
  }

  async function fetchJson(url) {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`fetch ${url}: ${r.status}`);
    return r.json();
  }

  /** The workload's batch: {input: {data (typed array), shape, dtype}, labels: {...}}. */
  async function loadBatch(workload) {
    const dir = `/bench/.cache/models/${workload}/`;
    const [manifest, bytes] = await Promise.all([fetchJson(dir + "batch.json"), fetchBytes(dir + "batch.bin")]);
    const out = { raw: bytes };
    for (const [name, m] of Object.entries(manifest)) {
      const slice = bytes.buffer.slice(m.offset, m.offset + m.nbytes);
      const data = m.dtype === "int64" ? new BigInt64Array(slice) : new Float32Array(slice);
      out[name] = { data, shape: m.shape, dtype: m.dtype };
    }
    return out;
  }

  // The loss seen by step PARITY_STEP (after PARITY_STEP - 1 updates) compares
  // optimisers across runtimes; keep in sync with native_runner.py.
  const PARITY_STEP = 21;

  /**
   * Time `step` (sync or async, returns the loss): the first call, warm-up calls (at least
   * `warmup` of them and for at least `warmupMs` ms: every runtime gets the same wall time for
   * V8 to tier its wasm up, whatever its step count), then `steps` timed calls.
   * performance.now() is coarsened to 100 us on pages that are not cross-origin isolated, so
   * steps are timed in blocks of about 5 ms and the block mean is the sample.
   */
  async function timeSteps(step, warmup, steps, warmupMs = 0) {
    let done = 0, parityLoss = null;
    const counted = async () => {
      const loss = await step();
      if (++done === PARITY_STEP) parityLoss = Number(loss);
      return loss;
    };
    const firstLoss = await counted();
    const coldMs = performance.now(); // since navigation start
    const tw = performance.now();
    let warmed = 0;
    while (warmed < warmup || performance.now() - tw < warmupMs) {
      await counted();
      warmed++;
    }
    const warmupMsDone = performance.now() - tw;
    const perStep = warmed > 0 ? warmupMsDone / warmed : 1;
    const block = Math.max(1, Math.min(steps, Math.round(5 / Math.max(perStep, 1e-3))));
    const samples = [];
    let lastLoss = firstLoss;
    let timed = 0;
    const memBefore = wasmMemoryBytes();
    while (timed < steps) {
      const n = Math.min(block, steps - timed);
      const t0 = performance.now();
      for (let i = 0; i < n; i++) lastLoss = await counted();
      samples.push((performance.now() - t0) / n);
      timed += n;
    }
    const sorted = [...samples].sort((a, b) => a - b);
    return {
      step_ms: sorted[Math.floor(sorted.length / 2)],
      step_ms_min: sorted[0],
      cold_ms: coldMs,
      first_loss: Number(firstLoss),
      last_loss: Number(lastLoss),
      loss_step21: parityLoss,
      warmup: warmed,
      warmup_ms: Math.round(warmupMsDone),
      steps,
      block,
      // for telling a busy machine from the page's own pauses: every block's mean, and whether
      // any wasm memory grew while timing (a grow copies or remaps the heap)
      samples_ms: samples.map((v) => Math.round(v * 1000) / 1000),
      memory_grew_mb: (wasmMemoryBytes() - memBefore) / 2 ** 20,
    };
  }

  /** Run the page's benchmark and publish the outcome on window.__bench for run.py (in a worker:
   * posted to the page, which publishes it: runInWorker). */
  function runBench(body) {
    const publish = typeof document === "undefined"
      ? (state) => self.postMessage({ bench: state })
      : (state) => { self.__bench = state; };
    publish({ status: "running" });
    (async () => {
      try {
        const res = await body(params());
        res.wasm_memory_mb = wasmMemoryBytes() / 2 ** 20;
        if (performance.memory) res.js_heap_mb = performance.memory.usedJSHeapSize / 2 ** 20;
        res.cross_origin_isolated = !!self.crossOriginIsolated;
        publish({ status: "done", result: res });
      } catch (e) {
        console.error(e);
        publish({ status: "error", error: String((e && e.stack) || e) });
      }
    })();
  }

  /** The page's benchmark in a worker (script url, same query): for code that waits with
   * Atomics.wait, which a page's main thread may not (pytrain's helper threads). */
  function runInWorker(url) {
    self.__bench = { status: "running" };
    const worker = new Worker(url + location.search);
    worker.onmessage = (e) => { if (e.data && e.data.bench) self.__bench = e.data.bench; };
    worker.onerror = (e) => { self.__bench = { status: "error", error: "worker: " + e.message }; };
  }

  Object.assign(self, { benchLib: { params, fetchBytes, fetchJson, loadBatch, timeSteps, runBench, runInWorker,
                                    wasmMemoryBytes } });
})();
