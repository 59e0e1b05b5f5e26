/*
 * Loader for gemm.wasm (a WebAssembly SIMD sgemm that imports its memory).
 *
 * Works as a classic <script> (defines globalThis.pytrainGemm) and as a
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
        if (!resp.ok) throw new Error(`gemm.js: cannot fetch ${source}: ${resp.status}`);
        return new Uint8Array(await resp.arrayBuffer());
      }
      return new Uint8Array(require("fs").readFileSync(source)); // Node path
    }
    if (source instanceof ArrayBuffer) return new Uint8Array(source);
    if (ArrayBuffer.isView(source)) {
      return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    }
    throw new TypeError("gemm.js: source must be a URL/path, ArrayBuffer or Uint8Array");
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
      throw new Error("gemm.js: this Pyodide has no _module.loadWebAssemblyModule");
    }
    const bytes = withDylinkSection(await toBytes(source));
    const exports = await mod.loadWebAssemblyModule(bytes, { loadAsync: true, allowUndefined: true });
    const workPtr = mod._malloc(exports.pytrain_sgemm_work_bytes() + 16);
    if (!workPtr) throw new Error("gemm.js: malloc of the gemm workspace failed");
    return wrap(exports, workPtr);
  }

  /* One call for pages: link the kernel into Pyodide and make it importable
   * from Python as `import <name>` (default pytrain_wasm_gemm). */
  async function registerWithPyodide(pyodide, source, name = "pytrain_wasm_gemm") {
    const gemm = await instantiateInPyodide(source, pyodide);
    pyodide.registerJsModule(name, pythonModule(gemm));
    return gemm;
  }

  /* What pytrain.ops.wasm_kernels imports as pytrain_wasm_gemm. */
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
      work_bytes: gemm.workBytes,
    };
  }

  const api = { instantiateWithMemory, instantiateInPyodide, registerWithPyodide, pythonModule, withDylinkSection };
  if (typeof module === "object" && module.exports) module.exports = api;
  root.pytrainGemm = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
