// Time web/kernels/kernels.wasm in Node: node gemm_node.js [wasm] [reps]
// Prints one JSON line {case, ms, min_ms, gflops} per case (see pages/gemm_raw.js).
"use strict";
const path = require("path");
const gemmJs = require(path.join(__dirname, "..", "web", "kernels", "kernels.js"));
const { benchGemmRaw } = require(path.join(__dirname, "pages", "gemm_raw.js"));

const wasm = process.argv[2] || path.join(__dirname, "..", "web", "kernels", "kernels.wasm");
const reps = Number(process.argv[3] || 50);
benchGemmRaw(gemmJs, wasm, reps)
  .then((rows) => rows.forEach((r) => console.log(JSON.stringify(r))))
  .catch((e) => { console.error(e); process.exit(1); });
