/*
 * One helper thread of kernels.js's startThreads (a Web Worker, or a Node worker_threads Worker):
 * it instantiates kernels-shared.wasm against the shared WebAssembly.Memory it is sent, says
 * "ready", then blocks in Atomics.wait until the calling thread bumps the call counter, runs its
 * part of the product (the arguments kernels.js wrote into its slot), and reports the counter
 * back in its slot's done word with Atomics.notify. The layout of the control words is
 * kernels.js's THREAD_* constants, sent along so it lives in one place.
 */
"use strict";

(function () {
  const nodePort = typeof self === "undefined" ? require("worker_threads").parentPort : null;
  const post = (msg) => (nodePort ? nodePort.postMessage(msg) : self.postMessage(msg));

  function serve(msg) {
    const { memory, bytes, slot, layout } = msg;
    const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } });
    const sgemm = instance.exports.pytrain_sgemm;
    const i32 = new Int32Array(memory.buffer, 0, layout.words);
    const f32 = new Float32Array(memory.buffer, 0, layout.words);
    const base = layout.slot0 + slot * layout.slotWords;
    let seen = Atomics.load(i32, layout.seq);   // before "ready": the first call may come right after it
    post({ ready: true });
    for (;;) {
      Atomics.wait(i32, layout.seq, seen);
      const now = Atomics.load(i32, layout.seq);
      if (now === seen) continue;
      seen = now;
      if (Atomics.load(i32, layout.stop)) break;
      const a = base + 1;
      if (i32[a]) {  // active: transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, work
        sgemm(i32[a + 1], i32[a + 2], i32[a + 3], i32[a + 4], i32[a + 5], f32[a + 6], i32[a + 7], i32[a + 8],
              i32[a + 9], i32[a + 10], f32[a + 11], i32[a + 12], i32[a + 13], i32[a + 14]);
      }
      Atomics.store(i32, base, seen);
      Atomics.notify(i32, base);
    }
    if (!nodePort) self.close();
  }

  if (nodePort) nodePort.once("message", serve);
  else self.onmessage = (e) => { self.onmessage = null; serve(e.data); };
})();
