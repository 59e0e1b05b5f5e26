/*
 * Loader for kernels.wasm (all of web/kernels/*.c: the WebAssembly SIMD sgemm and the
 * other kernels, one module that imports its memory).
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
 *   workBytes, workPtr, exports (the raw instance exports).
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

  function wrap(exports, workPtr) {
    const raw = exports.pytrain_sgemm;
    return {
      exports,
      workPtr,
      workBytes: exports.pytrain_sgemm_work_bytes(),
      sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) {
        raw(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, workPtr);
      },
      adam: exports.pytrain_adam,
      im2col: exports.pytrain_im2col,
      col2im: exports.pytrain_col2im,
      maxpool2d: exports.pytrain_maxpool2d,
      maxpool_grad: exports.pytrain_maxpool_grad,
      relu: exports.pytrain_relu,
      relu_grad: exports.pytrain_relu_grad,
      transpose: exports.pytrain_transpose,
      sum_rows: exports.pytrain_sum_rows,
      softmax_ce: exports.pytrain_softmax_ce,
      softmax_ce_grad: exports.pytrain_softmax_ce_grad,
      clip: exports.pytrain_clip,
      channel_affine: exports.pytrain_channel_affine,
      depthwise_conv2d: exports.pytrain_depthwise_conv2d,
      conv1x1: exports.pytrain_conv1x1
        ? (x, w, bias, y, n, c, m, s, tmp) => exports.pytrain_conv1x1(x, w, bias, y, n, c, m, s, tmp, workPtr)
        : undefined,
      exp: exports.pytrain_exp,
      erf: exports.pytrain_erf,
      sgemm_batched: exports.pytrain_sgemm_batched
        ? (count, ta, tb, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc) =>
          exports.pytrain_sgemm_batched(count, ta, tb, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc, workPtr)
        : undefined,
      layernorm: exports.pytrain_layernorm,
      layernorm_grad: exports.pytrain_layernorm_grad,
      softmax: exports.pytrain_softmax,
      gather_grad: exports.pytrain_gather_grad,
      first_non_finite: exports.pytrain_first_non_finite,
      binary: exports.pytrain_binary,
      gemm: exports.pytrain_gemm
        ? (ta, tb, M, N, K, A, lda, B, ldb, C, cKind, Y) =>
          exports.pytrain_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, cKind, Y, workPtr)
        : undefined,
    };
  }

  /* Instantiate against a WebAssembly.Memory the caller owns. */
  async function instantiateWithMemory(source, memory) {
    const bytes = await toBytes(source);
    const { instance } = await WebAssembly.instantiate(bytes, { env: { memory } });
    const need = instance.exports.pytrain_sgemm_work_bytes() + 16;
    const workPtr = memory.buffer.byteLength;
    memory.grow(Math.ceil(need / 65536));
    return wrap(instance.exports, workPtr);
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
    return wrap(exports, workPtr);
  }

  /* One call for pages: link the kernel into Pyodide and make it importable
   * from Python as `import <name>` (default pytrain_wasm_kernels). */
  async function registerWithPyodide(pyodide, source, name = "pytrain_wasm_kernels") {
    const gemm = await instantiateInPyodide(source, pyodide);
    pyodide.registerJsModule(name, pythonModule(gemm));
    return gemm;
  }

  /* What pytrain.ops.wasm imports as pytrain_wasm_kernels. */
  function pythonModule(gemm) {
    return {
      sgemm: gemm.sgemm,
      adam: gemm.adam,
      im2col: gemm.im2col,
      col2im: gemm.col2im,
      maxpool2d: gemm.maxpool2d,
      maxpool_grad: gemm.maxpool_grad,
      relu: gemm.relu,
      relu_grad: gemm.relu_grad,
      transpose: gemm.transpose,
      sum_rows: gemm.sum_rows,
      softmax_ce: gemm.softmax_ce,
      softmax_ce_grad: gemm.softmax_ce_grad,
      clip: gemm.clip,
      channel_affine: gemm.channel_affine,
      depthwise_conv2d: gemm.depthwise_conv2d,
      conv1x1: gemm.conv1x1,
      exp: gemm.exp,
      erf: gemm.erf,
      sgemm_batched: gemm.sgemm_batched,
      layernorm: gemm.layernorm,
      layernorm_grad: gemm.layernorm_grad,
      softmax: gemm.softmax,
      gather_grad: gemm.gather_grad,
      first_non_finite: gemm.first_non_finite,
      binary: gemm.binary,
      gemm: gemm.gemm,
      work_bytes: gemm.workBytes,
    };
  }

  const api = { instantiateWithMemory, instantiateInPyodide, registerWithPyodide, pythonModule, withDylinkSection };
  if (typeof module === "object" && module.exports) module.exports = api;
  root.pytrainKernels = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
