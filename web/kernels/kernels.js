/*
 * Loader for kernels.wasm (all of web/kernels/*.c: the WebAssembly SIMD sgemm and the
 * other kernels, one module that imports its memory), or its FMA build, kernels-fma.wasm, where the
 * engine has relaxed SIMD (kernelBuild).
 *
 * Works as a classic <script> (defines globalThis.pytrainKernels) and as a
 * CommonJS module in Node (module.exports).  Two ways to give it a memory:
 *
 *   - a WebAssembly.Memory you own (Node, tests): the workspace is taken
 *     from pages the loader grows onto the end of that memory;
 *   - a Pyodide 0.17 instance: Pyodide never exposes its WebAssembly.Memory
 *     object (pyodide.asm.js keeps `wasmMemory` in a closure and pyodide.js
 *     gives no hook to pre-set Module.wasmMemory), but it does expose its
 *     dynamic linker, pyodide._module.loadWebAssemblyModule, which links a
 *     module against the heap the same way it links numpy's .so files.  We
 *     prepend the emscripten "dylink" section that linker needs, so the
 *     kernel runs in place on numpy's buffers; the workspace comes from
 *     Pyodide's malloc.
 *
 * The resulting object:
 *   sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
 *     row-major float32, C = alpha*op(A)@op(B) + beta*C, pointers are byte
 *     addresses in the shared memory, leading dimensions in elements.
 *   workBytes, workPtr, exports (the raw instance exports), heap() (the memory's bytes now),
 *   threads (registerWithPyodide with a `threads` option in a cross-origin isolated worker:
 *   startThreads' helper threads, threads-team.js, whose sgemm Python sees as sgemm_threads).
 */
(function (root) {
  "use strict";

  async function toBytes(source) {
    if (typeof source === "string") {
      const isNode = typeof process === "object" && !!(process.versions && process.versions.node);
      if (!isNode || /^https?:/.test(source)) {
        const resp = await fetch(source);
        if (!resp.ok) throw new Error(`kernels.js: cannot fetch ${source}: ${resp.status}`);
        return new Uint8Array(await resp.arrayBuffer());
      }
      return new Uint8Array(require("fs").readFileSync(source)); // Node path
    }
    if (source instanceof ArrayBuffer) return new Uint8Array(source);
    if (ArrayBuffer.isView(source)) {
      return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    }
    throw new TypeError("kernels.js: source must be a URL/path, ArrayBuffer or Uint8Array");
  }

  /* Prepend emscripten's (pre-LLVM-13) side-module section: "dylink" with
   * memory size/align, table size/align and needed libraries all zero. */
  function withDylinkSection(bytes) {
    const name = [0x64, 0x79, 0x6c, 0x69, 0x6e, 0x6b]; // "dylink"
    const payload = [name.length, ...name, 0, 0, 0, 0, 0];
    const section = [0x00, payload.length, ...payload];
    const out = new Uint8Array(bytes.length + section.length);
    out.set(bytes.subarray(0, 8), 0); // magic + version
    out.set(section, 8);
    out.set(bytes.subarray(8), 8 + section.length);
    return out;
  }

  /* A module of one function returning f32x4.relaxed_madd(0, 0, 0): it validates only where the engine has
   * relaxed SIMD (Chrome >= 114 by default; Node 20 behind --experimental-wasm-relaxed-simd). */
  const RELAXED_MADD_PROBE = new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,       // magic, version
    0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b,             // type: () -> v128
    0x03, 0x02, 0x01, 0x00,                               // one function of that type
    0x0a, 0x3d, 0x01, 0x3b, 0x00,                         // its code: no locals,
    ...[0, 1, 2].flatMap(() => [0xfd, 0x0c, ...new Array(16).fill(0)]),   // three v128.const 0,
    0xfd, 0x85, 0x02, 0x0b]);                             // f32x4.relaxed_madd, end

  /* Which pair of build.sh's builds to run: "wasm-simd-fma" (kernels-fma.wasm and kernels-fma-shared.wasm:
   * gemm.c's multiply-adds as one relaxed_madd, a fused instruction where the CPU has one) where this
   * engine validates relaxed SIMD, else "wasm-simd" (kernels.wasm, kernels-shared.wasm). `want` ("fma",
   * "plain") overrides the detection (A/B runs). The single thread and the helpers must run the same pair:
   * a split product then has the unsplit one's bits (threads-team.js, makeChooser). */
  function kernelBuild(want) {
    const fma = want === "fma" || (want !== "plain" && WebAssembly.validate(RELAXED_MADD_PROBE));
    return fma ? { name: "wasm-simd-fma", wasm: "kernels-fma.wasm", shared: "kernels-fma-shared.wasm" }
               : { name: "wasm-simd", wasm: "kernels.wasm", shared: "kernels-shared.wasm" };
  }

  // the kernels a wrap() object and Python's module hand on as they are: kernels.wasm's pytrain_<name>
  const PLAIN_KERNELS = ["adam", "im2col", "col2im", "maxpool2d", "maxpool_grad", "relu", "relu_grad", "transpose", "sum_rows", "softmax_ce", "softmax_ce_grad", "clip", "channel_affine", "depthwise_conv2d", "exp", "erf", "layernorm", "layernorm_grad", "softmax", "gather_grad", "first_non_finite", "binary", "tanh",
                         "binary_rows", "hard_activation", "upsample_nearest", "row_means", "depthwise_conv2d_grad",
                         "hard_activation_grad", "batchnorm_training", "batchnorm_grad",
                         "softmax_ce_planes", "softmax_ce_planes_grad", "gelu_tanh", "gelu_tanh_grad", "gelu_erf",
                         "gelu_erf_grad"];
  // those the helper threads split (startThreads), which Python sees as <name>_threads
  const THREADED_KERNELS = ["sgemm", "sgemm_batched", "exp", "erf", "adam", "layernorm", "layernorm_grad", "softmax", "tanh",
                            "softmax_ce_grad", "gelu_tanh", "gelu_tanh_grad", "gelu_erf", "gelu_erf_grad"];

  function wrap(exports, workPtr, heap) {
    const raw = exports.pytrain_sgemm;
    const out = {
      exports,
      workPtr,
      heap,         // () => a Uint8Array over the whole memory the kernels run in (now: it may grow)
      workBytes: exports.pytrain_sgemm_work_bytes(),
      sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) {
        raw(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, workPtr);
      },
      conv1x1: exports.pytrain_conv1x1
        ? (x, w, bias, y, n, c, m, s, tmp) => exports.pytrain_conv1x1(x, w, bias, y, n, c, m, s, tmp, workPtr)
        : undefined,
      conv2d: exports.pytrain_conv2d
        ? (x, w, bias, y, n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, fold, tmp) =>
          exports.pytrain_conv2d(x, w, bias, y, n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, fold, tmp, workPtr)
        : undefined,
      conv2d_grad: exports.pytrain_conv2d_grad
        ? (x, w, dy, dx, dwt, n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, fold, tmp) =>
          exports.pytrain_conv2d_grad(x, w, dy, dx, dwt, n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, fold, tmp,
                                      workPtr)
        : undefined,
      conv_transpose_tiles: exports.pytrain_conv_transpose_tiles
        ? (x, w, bias, y, n, c, h, wd, m, kh, kw, tmp) =>
          exports.pytrain_conv_transpose_tiles(x, w, bias, y, n, c, h, wd, m, kh, kw, tmp, workPtr)
        : undefined,
      lstm_steps: exports.pytrain_lstm_steps
        ? (xw, rt, h0, c0, ys, ht, ct, pre, t, d, n, h) => exports.pytrain_lstm_steps(xw, rt, h0, c0, ys, ht, ct, pre, t, d, n, h, workPtr)
        : undefined,
      lstm_grad_steps: exports.pytrain_lstm_grad_steps
        ? (...a) => exports.pytrain_lstm_grad_steps(...a, workPtr)
        : undefined,
      sgemm_batched: exports.pytrain_sgemm_batched
        ? (count, ta, tb, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc) =>
          exports.pytrain_sgemm_batched(count, ta, tb, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc, workPtr)
        : undefined,
      gemm: exports.pytrain_gemm
        ? (ta, tb, M, N, K, A, lda, B, ldb, C, cKind, Y) =>
          exports.pytrain_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, cKind, Y, workPtr)
        : undefined,
    };
    for (const name of PLAIN_KERNELS) out[name] = exports["pytrain_" + name];
    return out;
  }

  /* Instantiate against a WebAssembly.Memory the caller owns. */
  async function instantiateWithMemory(source, memory) {
    const bytes = await toBytes(source);
    const { instance } = await WebAssembly.instantiate(bytes, { env: { memory } });
    const need = instance.exports.pytrain_sgemm_work_bytes() + 16;
    const workPtr = memory.buffer.byteLength;
    memory.grow(Math.ceil(need / 65536));
    return wrap(instance.exports, workPtr, () => new Uint8Array(memory.buffer));
  }

  /* Link into a loaded Pyodide 0.17 (pyodide or pyodide._module accepted). */
  async function instantiateInPyodide(source, pyodide) {
    const mod = pyodide._module || pyodide;
    if (typeof mod.loadWebAssemblyModule !== "function") {
      throw new Error("kernels.js: this Pyodide has no _module.loadWebAssemblyModule");
    }
    const bytes = withDylinkSection(await toBytes(source));
    const exports = await mod.loadWebAssemblyModule(bytes, { loadAsync: true, allowUndefined: true });
    const workPtr = mod._malloc(exports.pytrain_sgemm_work_bytes() + 16);
    if (!workPtr) throw new Error("kernels.js: malloc of the gemm workspace failed");
    return wrap(exports, workPtr, () => mod.HEAPU8);
  }

  /* One call for pages: link the kernel into Pyodide and make it importable
   * from Python as `import <name>` (default pytrain_wasm_kernels). */
  async function registerWithPyodide(pyodide, source, name = "pytrain_wasm_kernels", threads = null) {
    const gemm = await instantiateInPyodide(source, pyodide);
    if (threads) {
      try {
        gemm.threads = await startThreads(threads.source, gemm, threads);
      } catch (err) {
        console.warn("pytrain: no helper threads, every product runs on this thread:", err);
      }
    }
    pyodide.registerJsModule(name, pythonModule(gemm));
    return gemm;
  }

  /* The helper threads (threads-team.js next to this file, loaded when a page starts them: required in Node,
   * imported in a worker, the only place they can run: the calling thread waits for them with Atomics.wait).
   * Resolves to threads-team.js's team for `single` (a wrap() object), or null for count < 2. */
  async function startThreads(source, single, options = {}) {
    if (Math.min(Math.max(1, options.count || 2), 8) < 2) return null;
    let team = root.pytrainThreadsTeam;
    if (!team && typeof importScripts === "function") {
      importScripts(new URL("threads-team.js", new URL(options.workerURL, self.location.href)).href);
      team = root.pytrainThreadsTeam;
    }
    if (!team) team = require("./threads-team.js");   // Node
    return team.startThreads(await toBytes(source), single, options, THREADED_KERNELS);
  }

  /* What pytrain.ops.wasm imports as pytrain_wasm_kernels. */
  function pythonModule(gemm) {
    const out = { work_bytes: gemm.workBytes, threads: gemm.threads ? gemm.threads.count : 1 };
    for (const name of PLAIN_KERNELS.concat(["sgemm", "conv1x1", "conv2d", "conv2d_grad", "conv_transpose_tiles", "lstm_steps", "lstm_grad_steps", "sgemm_batched", "gemm"])) out[name] = gemm[name];
    for (const name of THREADED_KERNELS) out[name + "_threads"] = gemm.threads ? gemm.threads[name] : undefined;
    return out;
  }

  const api = { instantiateWithMemory, instantiateInPyodide, registerWithPyodide, pythonModule, withDylinkSection,
                startThreads, kernelBuild };
  if (typeof module === "object" && module.exports) module.exports = api;
  root.pytrainKernels = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
