/* The worker of threads_check.html: Pyodide 0.17.1 + numpy + web/kernels/kernels.wasm linked into its
 * heap, with the kernels' helper threads (kernels.js startThreads) when the page is cross-origin
 * isolated, and pytrain from the checkout's sources. A worker because the calling thread waits for
 * its helpers with Atomics.wait, which a page's main thread may not. Messages {id, op, arg}:
 *   "ready"   -> the threads products run on (1: no helpers)
 *   "calls"   -> products split across the threads so far
 *   "sources" -> paths under the served root written into the virtual FS, on sys.path
 *   "py"      -> runPython(arg): the last expression's value (a string: return JSON) */
"use strict";
self.importScripts("/node_modules/@pyodide/pyodide/dist/pyodide.js", "/web/kernels/kernels.js");

const spin = new URLSearchParams(self.location.search).get("spin");   // the page's ?spin=ms, if any
const pyodideReady = (async () => {
  const pyodide = await loadPyodide({ indexURL: "/node_modules/@pyodide/pyodide/dist/" });
  await pyodide.loadPackage(["numpy"]);
  const threads = self.crossOriginIsolated
    ? { source: "/web/kernels/kernels-shared.wasm", workerURL: "/web/kernels/threads-worker.js", count: 2,
        helperSpinMs: spin === null ? undefined : Number(spin) }
    : null;
  const gemm = await pytrainKernels.registerWithPyodide(pyodide, "/web/kernels/kernels.wasm", undefined, threads);
  return { pyodide, threads: gemm.threads };
})();

async function loadSources(pyodide, paths) {
  const FS = pyodide._module.FS;
  for (const p of paths) {
    const r = await fetch("/" + p);
    if (!r.ok) throw new Error(`fetch ${p}: ${r.status}`);
    FS.mkdirTree("/tmp/src/" + p.split("/").slice(0, -1).join("/"));
    FS.writeFile("/tmp/src/" + p, new Uint8Array(await r.arrayBuffer()));
  }
  pyodide.runPython("import sys\nif '/tmp/src' not in sys.path: sys.path.insert(0, '/tmp/src')");
  return paths.length;
}

self.onmessage = async (e) => {
  const { id, op, arg } = e.data;
  try {
    const { pyodide, threads } = await pyodideReady;
    let result = threads ? threads.count : 1;
    if (op === "calls") result = threads ? threads.calls : 0;
    if (op === "sources") result = await loadSources(pyodide, arg);
    else if (op === "py") result = pyodide.runPython(arg);
    self.postMessage({ id, ok: true, result });
  } catch (err) {
    self.postMessage({ id, ok: false, error: String(err && err.stack || err) });
  }
};
