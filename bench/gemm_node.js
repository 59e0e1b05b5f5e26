// Time web/kernels/gemm.wasm in Node: node gemm_node.js [wasm] [reps]
// Prints JSON lines {case, ms, gflops} for the shapes the MLP workload needs.
"use strict";
const path = require("path");
const gemmJs = require(path.join(__dirname, "..", "web", "kernels", "gemm.js"));

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function main() {
  const wasm = process.argv[2] || path.join(__dirname, "..", "web", "kernels", "gemm.wasm");
  const reps = Number(process.argv[3] || 200);
  const memory = new WebAssembly.Memory({ initial: 256 });
  const g = await gemmJs.instantiateWithMemory(wasm, memory);
  // [name, transA, transB, M, N, K]: forward x@W^T, dX = dY@W, dW = dY^T@X (MLP 784-128 at batch 64)
  const cases = [
    ["64x784@784x128 NN", 0, 0, 64, 128, 784],
    ["64x784@(128x784)^T NT", 0, 1, 64, 128, 784],
    ["64x128@128x784 NN", 0, 0, 64, 784, 128],
    ["(64x128)^T@64x784 TN", 1, 0, 128, 784, 64],
    ["256x256@256x256 NN", 0, 0, 256, 256, 256],
    ["63x785@785x129 NN", 0, 0, 63, 129, 785],
    ["64x120@120x84 NN", 0, 0, 64, 84, 120],
  ];
  let base = g.workPtr + g.workBytes + 64;
  for (const [name, tA, tB, M, N, K] of cases) {
    const need = 4 * (M * K + K * N + M * N) + 64;
    const have = memory.buffer.byteLength;
    if (base + need > have) memory.grow(Math.ceil((base + need - have) / 65536));
    const A = base, B = A + 4 * M * K, C = B + 4 * K * N;
    const f = new Float32Array(memory.buffer);
    for (let i = 0; i < M * K + K * N; i++) f[A / 4 + i] = Math.random() - 0.5;
    const lda = tA ? M : K, ldb = tB ? K : N;
    for (const t0 = performance.now(); performance.now() - t0 < 300;) g.sgemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 0, C, N);
    const times = [];
    for (let r = 0; r < reps; r++) {
      const t0 = performance.now();
      g.sgemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 0, C, N);
      times.push(performance.now() - t0);
    }
    const ms = median(times);
    const best = Math.min(...times);
    console.log(JSON.stringify({ case: name, ms: +ms.toFixed(4), min_ms: +best.toFixed(4), gflops: +((2 * M * N * K) / ms / 1e6).toFixed(2) }));
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
