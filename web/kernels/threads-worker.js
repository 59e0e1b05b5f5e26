/*
 * One helper thread of kernels.js's startThreads (a Web Worker, or a Node worker_threads Worker):
 * it instantiates kernels-shared.wasm against the shared WebAssembly.Memory it is sent, says
 * "ready", then blocks in Atomics.wait until the calling thread bumps the call counter, runs its
 * part of the product or of the stack of products (what, THREAD_OP, and the arguments kernels.js
 * wrote into its slot), and reports the counter back in its slot's done word with Atomics.notify.
 * The layout of the control words is kernels.js's THREAD_* constants, sent along so it lives in
 * one place.
 */
"use strict";

(function () {
  const nodePort = typeof self === "undefined" ? require("worker_threads").parentPort : null;
  const post = (msg) => (nodePort ? nodePort.postMessage(msg) : self.postMessage(msg));

  /* Run the module's products on a scratch memory of its own until V8 has tiered them up: it first runs
   * wasm from its baseline compiler (in Node 5x slower on these kernels) and optimizes a function only
   * once it has run a while, which a helper handed two products a training step reaches after hundreds
   * of steps (measured: 2 threads slower than 1 over a run's first 60 MLP steps). In Node the optimized
   * code arrives after ~20 rounds (~25 ms). Same Module, so it serves the real instance too. */
  function warmUp(module, maxPages) {
    const n = 96, scratch = new WebAssembly.Memory({ initial: 64, maximum: maxPages, shared: true });
    const k = new WebAssembly.Instance(module, { env: { memory: scratch } }).exports;
    const work = 65536, A = work + Math.ceil(k.pytrain_sgemm_work_bytes() / 64) * 64;
    const B = A + n * n * 4, C = B + n * n * 4;
    const until = performance.now() + 250;
    // square, thin and odd shapes (gemm.c's edge and dot-product paths), every transposition, beta 0 and 1
    const shapes = [[n, n, n], [8, 9, n], [n, 9, 8], [7, n, 5], [5, 7, n], [n - 3, n - 5, n - 7]];
    for (let rep = 0; rep < 40 && performance.now() < until; rep++) {
      for (const [m, nn, kk] of shapes) {
        for (let t = 0; t < 4; t++) k.pytrain_sgemm(t & 1, t >> 1, m, nn, kk, 1, A, n, B, n, rep & 1, C, n, work);
      }
      k.pytrain_sgemm_batched(4, 0, 1, 16, 16, n, A, 16 * n, n, B, 16 * n, n, C, 256, 16, work);
    }
  }

  function serve(msg) {
    const { memory, bytes, slot, layout } = msg;
    const module = new WebAssembly.Module(bytes);
    const instance = new WebAssembly.Instance(module, { env: { memory } });
    const sgemm = instance.exports.pytrain_sgemm;
    const batched = instance.exports.pytrain_sgemm_batched;
    const i32 = new Int32Array(memory.buffer, 0, layout.words);
    const f32 = new Float32Array(memory.buffer, 0, layout.words);
    const base = layout.slot0 + slot * layout.slotWords;
    let seen = Atomics.load(i32, layout.seq);   // before "ready": the first call may come right after it
    post({ ready: true });
    warmUp(module, layout.maxPages);   // after "ready": a call meanwhile waits for it (start-up does not)
    for (;;) {
      Atomics.wait(i32, layout.seq, seen);
      const now = Atomics.load(i32, layout.seq);
      if (now === seen) continue;
      seen = now;
      if (Atomics.load(i32, layout.stop)) break;
      const a = base + 1;
      const op = i32[a];
      if (op === layout.op.sgemm) {  // transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, work
        sgemm(i32[a + 1], i32[a + 2], i32[a + 3], i32[a + 4], i32[a + 5], f32[a + 6], i32[a + 7], i32[a + 8],
              i32[a + 9], i32[a + 10], f32[a + 11], i32[a + 12], i32[a + 13], i32[a + 14]);
      } else if (op === layout.op.sgemm_batched) {
        // count, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc, work
        batched(i32[a + 1], i32[a + 2], i32[a + 3], i32[a + 4], i32[a + 5], i32[a + 6], i32[a + 7], i32[a + 8],
                i32[a + 9], i32[a + 10], i32[a + 11], i32[a + 12], i32[a + 13], i32[a + 14], i32[a + 15], i32[a + 16]);
      }
      Atomics.store(i32, base, seen);
      Atomics.notify(i32, base);
    }
    if (!nodePort) self.close();
  }

  if (nodePort) nodePort.once("message", serve);
  else self.onmessage = (e) => { self.onmessage = null; serve(e.data); };
})();
