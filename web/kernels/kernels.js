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
 *   workBytes, workPtr, exports (the raw instance exports), heap() (the memory's bytes now),
 *   threads (registerWithPyodide with a `threads` option in a cross-origin isolated worker:
 *   startThreads' helper threads, whose sgemm Python sees as sgemm_threads).
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

  function wrap(exports, workPtr, heap) {
    const raw = exports.pytrain_sgemm;
    return {
      exports,
      workPtr,
      heap,         // () => a Uint8Array over the whole memory the kernels run in (now: it may grow)
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

  /* ---- Helper threads: big products split across workers sharing one memory ----
   * The calling thread's memory (Pyodide 0.17's heap) cannot be shared, so the helpers run
   * kernels-shared.wasm (build.sh's second build) on a shared WebAssembly.Memory of their own:
   * the calling thread copies in the operands of the helpers' parts, bumps the call counter
   * (Atomics.notify), runs its own part in place with the single-thread kernel, waits for each
   * helper's done word (Atomics.wait) and copies the helpers' results out. Products are split
   * by rows or by columns of C, never along K: every element of C is summed as the single-thread
   * kernel sums it (but where a thin part takes gemm.c's dot-product path: float32 reassociation).
   * Stacks of products (sgemm_batched: attention's heads) are split by whole products: each is the
   * single-thread kernel's. Needs SharedArrayBuffer, i.e. a cross-origin isolated page. */
  // Int32 words; a slot: done, what to run (THREAD_OP), then its arguments (sgemm's 14, sgemm_batched's 16)
  const THREAD_LAYOUT = { seq: 0, stop: 1, slot0: 16, slotWords: 20 };
  const THREAD_OP = { idle: 0, sgemm: 1, sgemm_batched: 2 };
  const THREAD_MAX_PAGES = 16384;   // build.sh's --max-memory (1 GiB)
  const WAIT_MS = 60000;          // a helper silent this long is dead: fail instead of hanging
  // The calling thread spins this long for its helpers before Atomics.wait: waking from it costs about as
  // much as a small product's half. Helpers do not spin (they sleep between products): measured in the tab,
  // a helper spinning 1 ms after each product won on a quiet machine (MLP products x0.60-0.67 against
  // x0.80-0.86) but cost ~2 ms a product once another process wanted the core (bench/RESULTS.md).
  const SPIN_MS = 1;

  function spawnThread(url) {
    if (typeof Worker === "undefined") {  // Node
      const w = new (require("worker_threads").Worker)(url);
      return { post: (m) => w.postMessage(m), once: (f) => w.once("message", f), fail: (f) => w.once("error", f),
               stop: () => w.terminate() };
    }
    const w = new Worker(url);
    return { post: (m) => w.postMessage(m), once: (f) => { w.onmessage = (e) => f(e.data); },
             fail: (f) => { w.onerror = (e) => f(new Error(e.message || "helper thread failed")); },
             stop: () => w.terminate() };
  }

  /* Start count - 1 helper threads for `single` (a wrap() object: the kernels of the calling
   * thread). options: {count, workerURL (threads-worker.js; Node: next to this file)}.
   * Resolves to {count, sgemm(...same arguments as single.sgemm...), stop(), memory, calls}, or null
   * for count < 2. */
  async function startThreads(source, single, options = {}) {
    const count = Math.min(Math.max(1, options.count || 2), 8);
    const helpers = count - 1;
    if (helpers < 1) return null;
    const bytes = await toBytes(source);
    const L = THREAD_LAYOUT;
    const words = L.slot0 + helpers * L.slotWords;
    const workStride = Math.ceil((single.workBytes + 16) / 64) * 64;
    const arena0 = Math.ceil((words * 4) / 64) * 64 + helpers * workStride;
    const memory = new WebAssembly.Memory({ initial: Math.ceil((arena0 + (4 << 20)) / 65536),
                                            maximum: THREAD_MAX_PAGES, shared: true });
    const url = options.workerURL || (typeof __dirname === "string" ? __dirname + "/threads-worker.js" : null);
    if (!url) throw new Error("kernels.js: startThreads needs options.workerURL");
    const workers = [];
    try {
      await Promise.all(Array.from({ length: helpers }, (_, slot) => new Promise((resolve, reject) => {
        const w = spawnThread(url);
        workers.push(w);
        w.fail(reject);
        w.once((m) => (m && m.ready ? resolve() : reject(new Error("helper thread: " + JSON.stringify(m)))));
        w.post({ memory, bytes, slot, layout: Object.assign({ words, op: THREAD_OP, maxPages: THREAD_MAX_PAGES }, L) });
      })));
    } catch (err) {
      workers.forEach((w) => w.stop());
      throw err;
    }
    const i32 = new Int32Array(memory.buffer, 0, words);
    const f32 = new Float32Array(memory.buffer, 0, words);
    let seq = 0;
    let mem = new Uint8Array(memory.buffer);
    let top = arena0;
    const alloc = (nbytes) => {
      const at = top;
      top += Math.ceil(nbytes / 16) * 16;
      if (top > mem.byteLength) {
        memory.grow(Math.ceil((top - memory.buffer.byteLength) / 65536));
        mem = new Uint8Array(memory.buffer);
      }
      return at;
    };
    const spanBytes = (rows, cols, ld) => ((rows - 1) * ld + cols) * 4;
    /* the rows x cols block at ptr (leading dimension ld) of the caller's heap, copied as one span */
    const copyBytes = (heap, ptr, n) => {
      const at = alloc(n);
      mem.set(heap.subarray(ptr, ptr + n), at);
      return at;
    };
    const copyIn = (heap, ptr, rows, cols, ld) => copyBytes(heap, ptr, spanBytes(rows, cols, ld));
    /* rows x cols between a block with leading dimension ld and a compact one (row by row unless both are) */
    const copyRows = (dst, dstLd, src, srcLd, rows, cols, to, from) => {
      if (dstLd === cols && srcLd === cols) { to.set(from.subarray(src, src + rows * cols * 4), dst); return; }
      for (let r = 0; r < rows; r++) {
        const s = src + r * srcLd * 4;
        to.set(from.subarray(s, s + cols * 4), dst + r * dstLd * 4);
      }
    };
    const cuts = (n, grain) => {
      const out = [0];
      for (let p = 1; p < count; p++) out.push(Math.min(n, Math.round((n * p) / count / grain) * grain));
      out.push(n);
      return out;
    };

    function sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) {
      // Split C by rows (each helper copies its rows of op(A), all of op(B)) or by columns (its
      // columns of op(B), all of op(A)): whichever copies less; too thin to split -> one thread.
      const share = helpers / count;
      const byRows = M >= 4 * count && (N < 8 * count || K * N + share * M * (K + N) <= M * K + share * N * (K + M));
      if (K === 0 || (!byRows && N < 8 * count)) { single.sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); return; }
      const heap = single.heap();
      top = arena0;
      team.calls += 1;
      const cut = byRows ? cuts(M, 4) : cuts(N, 8);
      // the operand every helper reads whole, copied once
      const whole = byRows ? copyIn(heap, B, transB ? N : K, transB ? K : N, ldb)
                           : copyIn(heap, A, transA ? K : M, transA ? M : K, lda);
      const outs = [];
      for (let h = 0; h < helpers; h++) {
        const lo = cut[h + 1], n = cut[h + 2] - lo;
        const a = L.slot0 + h * L.slotWords + 1;
        i32[a] = n > 0 ? THREAD_OP.sgemm : THREAD_OP.idle;
        if (n <= 0) continue;
        const rows = byRows ? n : M, cols = byRows ? N : n;
        let pa = whole, pb = whole;
        if (byRows) pa = transA ? copyIn(heap, A + lo * 4, K, n, lda) : copyIn(heap, A + lo * lda * 4, n, K, lda);
        else pb = transB ? copyIn(heap, B + lo * ldb * 4, n, K, ldb) : copyIn(heap, B + lo * 4, K, n, ldb);
        const src = byRows ? C + lo * ldc * 4 : C + lo * 4;
        const pc = alloc(rows * cols * 4);
        if (beta !== 0) copyRows(pc, cols, src, ldc, rows, cols, mem, heap);
        outs.push([src, pc, rows, cols]);
        i32[a + 1] = transA; i32[a + 2] = transB; i32[a + 3] = rows; i32[a + 4] = cols; i32[a + 5] = K;
        f32[a + 6] = alpha; i32[a + 7] = pa; i32[a + 8] = lda; i32[a + 9] = pb; i32[a + 10] = ldb;
        f32[a + 11] = beta; i32[a + 12] = pc; i32[a + 13] = cols;
        i32[a + 14] = Math.ceil((words * 4) / 64) * 64 + h * workStride;
      }
      run(() => {
        if (byRows) single.sgemm(transA, transB, cut[1], N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        else single.sgemm(transA, transB, M, cut[1], K, alpha, A, lda, B, ldb, beta, C, ldc);
      });
      const out = single.heap();   // the same heap: nothing allocates during the call
      for (const [dst, pc, rows, cols] of outs) copyRows(dst, ldc, pc, cols, rows, cols, out, mem);
    }

    /* Wake the helpers (their slots written), run the calling thread's part, wait for every helper. */
    function run(own) {
      seq = (seq + 1) | 0;
      Atomics.store(i32, L.seq, seq);
      Atomics.notify(i32, L.seq);
      own();
      for (let h = 0; h < helpers; h++) {
        const done = L.slot0 + h * L.slotWords;
        const until = performance.now() + SPIN_MS;
        while (Atomics.load(i32, done) !== seq && performance.now() < until) { /* spin */ }
        for (let v = Atomics.load(i32, done); v !== seq; v = Atomics.load(i32, done)) {
          if (Atomics.wait(i32, done, v, WAIT_MS) === "timed-out") throw new Error("kernels.js: a helper thread stopped answering");
        }
      }
    }

    /* single.sgemm_batched's stack of count products split by whole products: each helper copies
     * its products' operands (one span each: stride_a, stride_b >= 0) and writes its results
     * compactly, copied back into C. */
    function sgemmBatched(nb, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc) {
      if (nb < count || K === 0 || sa < 0 || sb < 0) {
        single.sgemm_batched(nb, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc);
        return;
      }
      const heap = single.heap();
      top = arena0;
      team.calls += 1;
      const cut = cuts(nb, 1);
      const spanA = spanBytes(transA ? K : M, transA ? M : K, lda);
      const spanB = spanBytes(transB ? N : K, transB ? K : N, ldb);
      const outs = [];
      for (let h = 0; h < helpers; h++) {
        const lo = cut[h + 1], n = cut[h + 2] - lo;
        const a = L.slot0 + h * L.slotWords + 1;
        i32[a] = n > 0 ? THREAD_OP.sgemm_batched : THREAD_OP.idle;
        if (n <= 0) continue;
        const pa = copyBytes(heap, A + lo * sa * 4, (n - 1) * sa * 4 + spanA);
        const pb = copyBytes(heap, B + lo * sb * 4, (n - 1) * sb * 4 + spanB);
        const pc = alloc(n * M * N * 4);
        outs.push([C + lo * sc * 4, pc, n]);
        const args = [n, transA, transB, M, N, K, pa, sa, lda, pb, sb, ldb, pc, M * N, N,
                      Math.ceil((words * 4) / 64) * 64 + h * workStride];
        for (let i = 0; i < args.length; i++) i32[a + 1 + i] = args[i];
      }
      run(() => single.sgemm_batched(cut[1], transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc));
      const out = single.heap();
      for (const [dst, pc, n] of outs) {
        if (sc === M * N && ldc === N) { out.set(mem.subarray(pc, pc + n * M * N * 4), dst); continue; }
        for (let i = 0; i < n; i++) copyRows(dst + i * sc * 4, ldc, pc + i * M * N * 4, N, M, N, out, mem);
      }
    }

    function stop() {
      Atomics.store(i32, L.stop, 1);
      seq = (seq + 1) | 0;
      Atomics.store(i32, L.seq, seq);
      Atomics.notify(i32, L.seq);
      workers.forEach((w) => w.stop());
    }

    const team = { count, sgemm, sgemm_batched: single.sgemm_batched ? sgemmBatched : undefined, stop, memory,
                   calls: 0 };   // calls: products (and stacks of them) split so far
    return team;
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
      sgemm_threads: gemm.threads ? gemm.threads.sgemm : undefined,
      sgemm_batched_threads: gemm.threads ? gemm.threads.sgemm_batched : undefined,
      threads: gemm.threads ? gemm.threads.count : 1,
    };
  }

  const api = { instantiateWithMemory, instantiateInPyodide, registerWithPyodide, pythonModule, withDylinkSection,
                startThreads };
  if (typeof module === "object" && module.exports) module.exports = api;
  root.pytrainKernels = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
