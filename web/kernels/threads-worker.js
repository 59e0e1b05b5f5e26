/*
 * One helper thread of threads-team.js's startThreads (a Web Worker, or a Node worker_threads Worker):
 * it instantiates kernels-shared.wasm against the shared WebAssembly.Memory it is sent, says
 * "ready", then blocks in Atomics.wait until the calling thread bumps the call counter, runs its
 * part of the call (which of THREAD_KERNELS, and the arguments threads-team.js's post() wrote into its
 * slot), and reports the counter back in its slot's done word with Atomics.notify (the kernel's
 * return value in the word after the kernel's index).
 * The layout of the control words is threads-team.js's THREAD_* constants, sent along so it lives in
 * one place.
 */
"use strict";

(function () {
  const nodePort = typeof self === "undefined" ? require("worker_threads").parentPort : null;
  const post = (msg) => (nodePort ? nodePort.postMessage(msg) : self.postMessage(msg));

  /* Run the module's products and the other kernels threads-team.js splits on a scratch memory of its own
   * until V8 has tiered them up: it first runs wasm from its baseline compiler (in Node 5x slower on
   * these kernels) and optimizes a function only once it has run a while, which a helper handed two
   * products a training step reaches after hundreds of steps (measured: 2 threads slower than 1 over a
   * run's first 60 MLP steps). In Node the optimized code arrives after ~20 rounds (~25 ms). Same Module, so it serves the real instance too. */
  function warmUp(module, maxPages) {
    const n = 96, scratch = new WebAssembly.Memory({ initial: 64, maximum: maxPages, shared: true });
    const k = new WebAssembly.Instance(module, { env: { memory: scratch } }).exports;
    const work = 65536, A = work + Math.ceil(k.pytrain_sgemm_work_bytes() / 64) * 64;
    const B = A + n * n * 4, C = B + n * n * 4, D = C + n * n * 4, T = 1024;
    const table = new Int32Array(scratch.buffer, T, 5);
    const until = performance.now() + 250;
    // square, thin and odd shapes (gemm.c's edge and dot-product paths), every transposition, beta 0 and 1
    const shapes = [[n, n, n], [8, 9, n], [n, 9, 8], [7, n, 5], [5, 7, n], [n - 3, n - 5, n - 7]];
    for (let rep = 0; rep < 40 && performance.now() < until; rep++) {
      for (const [m, nn, kk] of shapes) {
        for (let t = 0; t < 4; t++) k.pytrain_sgemm(t & 1, t >> 1, m, nn, kk, 1, A, n, B, n, rep & 1, C, n, work);
      }
      k.pytrain_sgemm_batched(4, 0, 1, 16, 16, n, A, 16 * n, n, B, 16 * n, n, C, 256, 16, work);
      // the element-wise and row kernels threads-team.js's split() hands over, on n rows of n (zeros: no NaN)
      k.pytrain_exp(A, C, n * n - 1);
      k.pytrain_erf(A, C, n * n - 1);
      k.pytrain_softmax(A, C, n, n);
      k.pytrain_layernorm(A, B, B, C, 0, 0, n, n, 1e-5);
      k.pytrain_layernorm_grad(A, B, B, C, C, D, 0, 0, n, n);
      k.pytrain_softmax_ce_grad(D, D + n * n * 4, n, n, 1, C);   // (log-probabilities 0, labels 0: untouched memory)
      table.set([n * n - 1, A, B, C, D]);
      k.pytrain_adam(T, 1, 0.1, 0.9, 0.001, 0.999, 1, 1e-8, 1e-3, 0.01, 1, 1);
    }
  }

  function serve(msg) {
    const { memory, bytes, slot, layout } = msg;
    const module = new WebAssembly.Module(bytes);
    const instance = new WebAssembly.Instance(module, { env: { memory } });
    const kernels = layout.kernels.map((name) => instance.exports[name]);
    const i32 = new Int32Array(memory.buffer, 0, layout.words);
    const f64 = new Float64Array(memory.buffer, 0, layout.words >> 1);
    const base = layout.slot0 + slot * layout.slotWords;
    const args = new Array(layout.maxArgs);
    let seen = Atomics.load(i32, layout.seq);   // before "ready": the first call may come right after it
    post({ ready: true });
    warmUp(module, layout.maxPages);   // after "ready": a call meanwhile waits for it (start-up does not)
    for (;;) {
      // spin first for layout.spinMs (threads-team.js HELPER_SPIN_MS: 0, a spin measured slower), then sleep
      for (const until = performance.now() + layout.spinMs; Atomics.load(i32, layout.seq) === seen &&
           performance.now() < until;) { /* spin */ }
      Atomics.wait(i32, layout.seq, seen);
      const now = Atomics.load(i32, layout.seq);
      if (now === seen) continue;
      seen = now;
      if (Atomics.load(i32, layout.stop)) break;
      const kernel = i32[base + 1];
      if (kernel >= 0) {   // the kernel's arguments as threads-team.js's post() wrote them
        const argc = i32[base + 2], f = (base + layout.args) >> 1;
        args.length = argc;
        for (let i = 0; i < argc; i++) args[i] = f64[f + i];
        i32[base + 2] = kernels[kernel](...args) | 0;
      }
      Atomics.store(i32, base, seen);
      Atomics.notify(i32, base);
    }
    if (!nodePort) self.close();
  }

  if (nodePort) nodePort.once("message", serve);
  else self.onmessage = (e) => { self.onmessage = null; serve(e.data); };
})();
