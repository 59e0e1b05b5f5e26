// Raw sgemm timings with operands already in wasm memory; shared by Node
// (bench/gemm_node.js) and the browser (bench/pages/gemm_raw.html).
"use strict";

(function (root) {
  // [name, transA, transB, M, N, K]: the MLP 784-128-10 and LeNet products at batch 64, a few others.
  const CASES = [
    ["64x784@784x128 NN", 0, 0, 64, 128, 784],
    ["64x784@(128x784)^T NT", 0, 1, 64, 128, 784],
    ["64x128@128x784 NN", 0, 0, 64, 784, 128],
    ["(64x128)^T@64x784 TN", 1, 0, 128, 784, 64],
    ["256x256@256x256 NN", 0, 0, 256, 256, 256],
    ["63x785@785x129 NN", 0, 0, 63, 129, 785],
    ["64x120@120x84 NN", 0, 0, 64, 84, 120],
    ["conv1 6x25@25x36864 NN", 0, 0, 6, 36864, 25],
    ["conv1 dW 6x36864@(25x36864)^T NT", 0, 1, 6, 25, 36864],
    ["conv2 16x150@150x4096 NN", 0, 0, 16, 4096, 150],
    ["conv2 dW 16x4096@(150x4096)^T NT", 0, 1, 16, 150, 4096],
    ["conv2 dX (16x150)^T@16x4096 TN", 1, 0, 150, 4096, 16],
    // the GPT-2 LoRA step's (bench/workloads.py: 8 x 64 tokens, n_embd 128, 2 heads, vocabulary 1000)
    ["gpt2 lm_head 512x128@(1000x128)^T NT", 0, 1, 512, 1000, 128],
    ["gpt2 lm_head dX 512x1000@1000x128 NN", 0, 0, 512, 128, 1000],
    ["gpt2 c_attn 512x128@128x384 NN", 0, 0, 512, 384, 128],
    ["gpt2 c_fc 512x128@128x512 NN", 0, 0, 512, 512, 128],
    ["gpt2 c_proj 512x512@512x128 NN", 0, 0, 512, 128, 512],
    ["gpt2 c_fc dX 512x512@(128x512)^T NT", 0, 1, 512, 128, 512],
    ["gpt2 head QK^T 64x64@(64x64)^T NT", 0, 1, 64, 64, 64],
    ["gpt2 head PV 64x64@64x64 NN", 0, 0, 64, 64, 64],
  ];

  async function benchGemmRaw(gemmApi, wasmSource, reps) {
    const memory = new WebAssembly.Memory({ initial: 256 });
    const g = await gemmApi.instantiateWithMemory(wasmSource, memory);
    const base = g.workPtr + g.workBytes + 64;
    const results = [];
    for (const [name, tA, tB, M, N, K] of CASES) {
      const need = base + 4 * (M * K + K * N + M * N) + 64 - memory.buffer.byteLength;
      if (need > 0) memory.grow(Math.ceil(need / 65536));
      const A = base, B = A + 4 * M * K, C = B + 4 * K * N;
      const f = new Float32Array(memory.buffer);
      for (let i = 0; i < M * K + K * N; i++) f[A / 4 + i] = Math.random() - 0.5;
      const lda = tA ? M : K, ldb = tB ? K : N;
      const call = () => g.sgemm(tA, tB, M, N, K, 1, A, lda, B, ldb, 0, C, N);
      // Warm up for 300 ms: wasm starts on the baseline compiler and has no OSR,
      // so it needs calls (not one long call) to reach optimised code.
      for (const t0 = performance.now(); performance.now() - t0 < 300;) call();
      // Blocks of ~5 ms: browsers coarsen performance.now() to 0.1 ms.
      let n = 1;
      for (let t0 = performance.now(); performance.now() - t0 < 5; n++) call();
      const times = [];
      for (let r = 0; r < reps; r++) {
        const t0 = performance.now();
        for (let i = 0; i < n; i++) call();
        times.push((performance.now() - t0) / n);
      }
      times.sort((a, b) => a - b);
      const ms = times[Math.floor(times.length / 2)];
      results.push({ case: name, ms: +ms.toFixed(4), min_ms: +times[0].toFixed(4),
                     gflops: +((2 * M * N * K) / ms / 1e6).toFixed(2) });
    }
    return results;
  }

  if (typeof module === "object" && module.exports) module.exports = { benchGemmRaw, CASES };
  root.benchGemmRaw = benchGemmRaw;
})(typeof globalThis !== "undefined" ? globalThis : this);
