/*
 * The calling side of the kernels' helper threads (kernels.js startThreads loads this file when a page starts
 * them; threads-worker.js is the helpers' side). Works as a classic script in a worker (defines
 * globalThis.pytrainThreadsTeam) and as a CommonJS module in Node.
 */
(function (root) {
  "use strict";

  /* ---- Helper threads: big products and element-wise/row kernels split across workers sharing one memory ----
   * The calling thread's memory (Pyodide 0.17's heap) cannot be shared, so the helpers run
   * kernels-shared.wasm (build.sh's second build) on a shared WebAssembly.Memory of their own:
   * the calling thread copies in the operands of the helpers' parts, bumps the call counter
   * (Atomics.notify), runs its own part in place with the single-thread kernel, waits for each
   * helper's done word (Atomics.wait) and copies the helpers' results out. Products are split
   * by rows or by columns of C, never along K: every element of C is summed as the single-thread
   * kernel sums it (but where a thin part takes gemm.c's dot-product path: float32 reassociation).
   * Stacks of products (sgemm_batched: attention's heads) are split by whole products: each is the
   * single-thread kernel's. Exp, Erf, Adam, Softmax, LayerNorm and LayerNorm's dx are split by contiguous
   * ranges of elements or rows (split()), each element or row the single-thread code's. Every hand-over
   * writes a helper's slot through post(). Needs SharedArrayBuffer, i.e. a cross-origin isolated page. */
  // Int32 words; a slot: done, the kernel to run (an index into THREAD_KERNELS, -1: none), its result, then
  // its arguments as float64 from word 4 (sgemm_batched's 16 at most): a float64 holds every i32 pointer and
  // every JS number exactly, so the helper's call converts them to the wasm types as the calling thread's does
  const THREAD_LAYOUT = { seq: 0, stop: 1, slot0: 16, slotWords: 40, args: 4, maxArgs: 16 };
  const THREAD_MAX_PAGES = 16384;   // build.sh's --max-memory (1 GiB)
  const WAIT_MS = 60000;          // a helper silent this long is dead: fail instead of hanging
  // The calling thread spins this long for its helpers before Atomics.wait: waking from it costs about as
  // much as a small product's half. Helpers do not spin (they sleep between products): measured in the tab,
  // a helper spinning 1 ms after each product won on a quiet machine (MLP products x0.60-0.67 against
  // x0.80-0.86) but cost ~2 ms a product once another process wanted the core (bench/RESULTS.md).
  const SPIN_MS = 1;
  // A helper spins this long after its part before it sleeps (options.helperSpinMs), so that the next
  // hand-over of the same step could find it awake. Measured (bench/threads_bench.py --only steps --spin,
  // products split from 4.2M): 0.1 and 0.2 ms made the MLP step slower than none, quiet (x1.32-1.54 against
  // x1.02-1.13) and loaded: off.
  const HELPER_SPIN_MS = 0;
  // At most this many bytes of read-only operands (frozen weights) kept in the helpers' shared memory between calls
  const KEEP_BYTES = 64 << 20;
  // The helper threads decide per call shape from what they measure (options.adaptive, default on): a shape's
  // first calls run split and alone in turn (split first), then the faster way (the median of its last
  // THREAD_SAMPLES times: a loaded machine's times have long tails, and a shape's first split pays one-off
  // costs, the shared memory's growth among them) runs, and THREAD_REPROBE calls later the
  // other way runs once, so a core that becomes free (or busy) is noticed; each re-timing that finds the other
  // way still slower doubles the wait (up to THREAD_REPROBE_MAX calls): on a loaded machine a split can take
  // 3x as long as the calling thread alone, and re-timing it often would cost more than the choice saves.
  // A fixed size threshold tuned on a quiet machine made 2 threads lose to 1 where another process wanted
  // the core (issue 34).
  const THREAD_PROBES = 3;
  const THREAD_REPROBE = 24;
  const THREAD_REPROBE_MAX = 96;
  const THREAD_SAMPLES = 5;
  const median = (xs) => { const t = xs.slice().sort((a, b) => a - b); return t[t.length >> 1]; };

  /* The per-shape choice between the calling thread alone and the split run: pick(key) says whether this call
   * splits, record(key, split, ms) adds its time. Every way gives the same bits, so the choice changes only
   * the time. */
  function makeChooser() {
    const stats = new Map();
    return {
      stats,
      pick(key) {
        let s = stats.get(key);
        if (!s) {
          s = { calls: 0, ms: [0, 0], seen: [0, 0], times: [[], []], wait: THREAD_REPROBE,
                next: 2 * THREAD_PROBES + THREAD_REPROBE, reprobe: false };
          stats.set(key, s);
        }
        s.calls += 1;
        if (s.calls <= 2 * THREAD_PROBES) return (s.calls & 1) === 1;
        const best = s.ms[1] < s.ms[0];
        s.reprobe = s.calls >= s.next;
        return s.reprobe ? !best : best;
      },
      record(key, split, ms) {
        const s = stats.get(key), i = split ? 1 : 0;
        const times = s.times[i];
        times.push(ms);
        if (times.length > THREAD_SAMPLES) times.shift();
        s.ms[i] = median(times);
        s.seen[i] += 1;
        if (!s.reprobe) return;
        s.reprobe = false;
        // the way re-timed still the slower: wait twice as long for the next re-timing; else start over
        s.wait = s.ms[i] >= s.ms[1 - i] ? Math.min(2 * s.wait, THREAD_REPROBE_MAX) : THREAD_REPROBE;
        s.next = s.calls + s.wait;
      },
    };
  }

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
   * thread) running kernels-shared.wasm's `bytes`; `threaded`: the kernels they can run. options: {count, workerURL (threads-worker.js; Node: next to this file), helperSpinMs}.
   * Resolves to {count, sgemm(...same arguments as single.sgemm...), sgemm_batched, exp, erf, adam,
   * layernorm, layernorm_grad, softmax (each with its single-thread kernel's arguments), stop(), memory,
   * calls, choices (makeChooser's stats)}, or null for count < 2. options.adaptive false: every call big enough
   * is split (no timing, no choice). */
  async function startThreads(bytes, single, options, threaded) {
    const count = Math.min(Math.max(1, options.count || 2), 8);
    const helpers = count - 1;
    if (helpers < 1) return null;
    // what a helper can run: kernels-shared.wasm's exports of these names (kernels.js's THREADED_KERNELS)
    const THREAD_KERNELS = threaded.map((name) => "pytrain_" + name);
    const adaptive = options.adaptive !== false;
    const chooser = makeChooser();
    const L = THREAD_LAYOUT;
    const words = L.slot0 + helpers * L.slotWords;
    const workStride = Math.ceil((single.workBytes + 16) / 64) * 64;
    const work0 = Math.ceil((words * 4) / 64) * 64;
    const arenaBase = work0 + helpers * workStride;
    let arena0 = arenaBase;   // a call's copies start here; below it (from arenaBase) the kept copies
    const memory = new WebAssembly.Memory({ initial: Math.ceil((arena0 + (4 << 20)) / 65536),
                                            maximum: THREAD_MAX_PAGES, shared: true });
    const url = options.workerURL || (typeof __dirname === "string" ? __dirname + "/threads-worker.js" : null);
    if (!url) throw new Error("threads-team.js: startThreads needs options.workerURL");
    const workers = [];
    try {
      await Promise.all(Array.from({ length: helpers }, (_, slot) => new Promise((resolve, reject) => {
        const w = spawnThread(url);
        workers.push(w);
        w.fail(reject);
        w.once((m) => (m && m.ready ? resolve() : reject(new Error("helper thread: " + JSON.stringify(m)))));
        const spinMs = options.helperSpinMs === undefined ? HELPER_SPIN_MS : options.helperSpinMs;
        w.post({ memory, bytes, slot,
                 layout: Object.assign({ words, kernels: THREAD_KERNELS, maxPages: THREAD_MAX_PAGES, spinMs }, L) });
      })));
    } catch (err) {
      workers.forEach((w) => w.stop());
      throw err;
    }
    const i32 = new Int32Array(memory.buffer, 0, words);
    const f64 = new Float64Array(memory.buffer, 0, words >> 1);
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
    /* A read-only operand (a frozen weight: Python's `keep` token, unique to one live read-only array, 0 for
     * any other) copied once and kept between calls below arena0, so a frozen weight is not copied into the
     * shared memory on every product; past KEEP_BYTES of kept copies they are all dropped and kept anew. Call
     * first after `top = arena0`, before the call's other copies (a new kept copy moves arena0 past it). */
    const kept = new Map();
    const copyKept = (heap, ptr, nbytes, token) => {
      if (!token) return copyBytes(heap, ptr, nbytes);
      const key = `${token}:${ptr}:${nbytes}`;
      const hit = kept.get(key);
      if (hit !== undefined) { team.keptHits += 1; return hit; }
      if (arena0 - arenaBase + nbytes > KEEP_BYTES) { kept.clear(); arena0 = arenaBase; }
      top = arena0;
      const at = copyBytes(heap, ptr, nbytes);
      arena0 = top;
      kept.set(key, at);
      return at;
    };
    /* rows x cols between a block with leading dimension ld and a compact one (row by row unless both are) */
    const copyRows = (dst, dstLd, src, srcLd, rows, cols, to, from) => {
      if (dstLd === cols && srcLd === cols) { to.set(from.subarray(src, src + rows * cols * 4), dst); return; }
      for (let r = 0; r < rows; r++) {
        const s = src + r * srcLd * 4;
        to.set(from.subarray(s, s + cols * 4), dst + r * dstLd * 4);
      }
    };
    /* where the count parts of [0, n) start, multiples of grain; the calling thread's (the first) is
     * `own` of the whole (default an equal share) */
    const cuts = (n, grain, own = 1 / count) => {
      const out = [0], rest = (1 - own) / helpers;
      for (let p = 1; p < count; p++) out.push(Math.min(n, Math.round((n * (own + (p - 1) * rest)) / grain) * grain));
      out.push(n);
      return out;
    };
    const work = (h) => work0 + h * workStride;   // helper h's gemm workspace
    /* the helpers' outputs, [caller's ptr, shared ptr, bytes] each, back into the caller's heap */
    const copyBack = (outs) => {
      const out = single.heap();   // the same heap as before the call: nothing allocates during it
      for (const [dst, at, nbytes] of outs) out.set(mem.subarray(at, at + nbytes), dst);
    };

    /* Helper h's slot: run THREAD_KERNELS' `kernel` with `args` (null: nothing this call). */
    function post(h, kernel, args) {
      const a = L.slot0 + h * L.slotWords;
      if (kernel === null) { i32[a + 1] = -1; return; }
      i32[a + 1] = THREAD_KERNELS.indexOf(kernel);
      i32[a + 2] = args.length;
      const f = (a + L.args) >> 1;
      for (let i = 0; i < args.length; i++) f64[f + i] = args[i];
    }

    /* Whether the calling thread alone or the split run serves this call (options.adaptive false: always
     * split), timed for the next choice of `key`'s calls; returns what the way taken returns. */
    function decide(key, alone, together) {
      if (!adaptive) return together();
      const split = chooser.pick(key);
      const t0 = performance.now();
      const out = split ? together() : alone();
      chooser.record(key, split, performance.now() - t0);
      return out;
    }

    // gemm.c's use_dot: the dot-product path, which sums in another order than the packed one
    const useDot = (transA, transB, M, N, K) => !transA && transB && M * N <= 4096 && K >= 4 * (M + N);

    function sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, keepA = 0, keepB = 0) {
      // Split C by rows (each helper copies its rows of op(A), all of op(B)) or by columns (its
      // columns of op(B), all of op(A)): whichever copies less; too thin to split -> one thread.
      const alone = () => single.sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      const share = helpers / count;
      const byRows = M >= 4 * count && (N < 8 * count || K * N + share * M * (K + N) <= M * K + share * N * (K + M));
      if (K === 0 || (!byRows && N < 8 * count)) { alone(); return; }
      const cut = byRows ? cuts(M, 4) : cuts(N, 8);
      // a part that would take the dot-product path where the whole does not: one thread, so that a product's
      // bits never depend on whether it was split
      const whole = useDot(transA, transB, M, N, K);
      for (let p = 0; p < count; p++) {
        const n = cut[p + 1] - cut[p];
        if (n > 0 && useDot(transA, transB, byRows ? n : M, byRows ? N : n, K) !== whole) { alone(); return; }
      }
      decide(`s${transA}${transB}:${M}:${N}:${K}:${beta !== 0 ? 1 : 0}`, alone,
             () => sgemmSplit(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, byRows, cut, keepA, keepB));
    }

    function sgemmSplit(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, byRows, cut, keepA, keepB) {
      const heap = single.heap();
      top = arena0;
      team.calls += 1;
      // the operand every helper reads whole, copied once (kept between calls when read-only)
      const whole = byRows ? copyKept(heap, B, spanBytes(transB ? N : K, transB ? K : N, ldb), keepB)
                           : copyKept(heap, A, spanBytes(transA ? K : M, transA ? M : K, lda), keepA);
      const outs = [];
      for (let h = 0; h < helpers; h++) {
        const lo = cut[h + 1], n = cut[h + 2] - lo;
        if (n <= 0) { post(h, null); continue; }
        const rows = byRows ? n : M, cols = byRows ? N : n;
        let pa = whole, pb = whole;
        if (byRows) pa = transA ? copyIn(heap, A + lo * 4, K, n, lda) : copyIn(heap, A + lo * lda * 4, n, K, lda);
        else pb = transB ? copyIn(heap, B + lo * ldb * 4, n, K, ldb) : copyIn(heap, B + lo * 4, K, n, ldb);
        const src = byRows ? C + lo * ldc * 4 : C + lo * 4;
        const pc = alloc(rows * cols * 4);
        if (beta !== 0) copyRows(pc, cols, src, ldc, rows, cols, mem, heap);
        outs.push([src, pc, rows, cols]);
        post(h, "pytrain_sgemm", [transA, transB, rows, cols, K, alpha, pa, lda, pb, ldb, beta, pc, cols, work(h)]);
      }
      run(() => {
        if (byRows) single.sgemm(transA, transB, cut[1], N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        else single.sgemm(transA, transB, M, cut[1], K, alpha, A, lda, B, ldb, beta, C, ldc);
      });
      const out = single.heap();   // the same heap: nothing allocates during the call
      for (const [dst, pc, rows, cols] of outs) copyRows(dst, ldc, pc, cols, rows, cols, out, mem);
    }

    /* Wake the helpers (their slots written), run the calling thread's part, wait for every helper;
     * returns the helpers' results (the kernels' return values). */
    function run(own) {
      seq = (seq + 1) | 0;
      Atomics.store(i32, L.seq, seq);
      Atomics.notify(i32, L.seq);
      own();
      const results = [];
      for (let h = 0; h < helpers; h++) {
        const done = L.slot0 + h * L.slotWords;
        const until = performance.now() + SPIN_MS;
        while (Atomics.load(i32, done) !== seq && performance.now() < until) { /* spin */ }
        for (let v = Atomics.load(i32, done); v !== seq; v = Atomics.load(i32, done)) {
          if (Atomics.wait(i32, done, v, WAIT_MS) === "timed-out") throw new Error("threads-team.js: a helper thread stopped answering");
        }
        results.push(i32[done + 2]);
      }
      return results;
    }

    /* single.sgemm_batched's stack of count products split by whole products: each helper copies
     * its products' operands (one span each: stride_a, stride_b >= 0) and writes its results
     * compactly, copied back into C. */
    function sgemmBatched(nb, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc) {
      const alone = () => single.sgemm_batched(nb, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc);
      if (nb < count || K === 0 || sa < 0 || sb < 0) { alone(); return; }
      decide(`b${transA}${transB}:${nb}:${M}:${N}:${K}`, alone,
             () => sgemmBatchedSplit(nb, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc));
    }

    function sgemmBatchedSplit(nb, transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc) {
      const heap = single.heap();
      top = arena0;
      team.calls += 1;
      const cut = cuts(nb, 1);
      const spanA = spanBytes(transA ? K : M, transA ? M : K, lda);
      const spanB = spanBytes(transB ? N : K, transB ? K : N, ldb);
      const outs = [];
      for (let h = 0; h < helpers; h++) {
        const lo = cut[h + 1], n = cut[h + 2] - lo;
        if (n <= 0) { post(h, null); continue; }
        const pa = copyBytes(heap, A + lo * sa * 4, (n - 1) * sa * 4 + spanA);
        const pb = copyBytes(heap, B + lo * sb * 4, (n - 1) * sb * 4 + spanB);
        const pc = alloc(n * M * N * 4);
        outs.push([C + lo * sc * 4, pc, n]);
        post(h, "pytrain_sgemm_batched", [n, transA, transB, M, N, K, pa, sa, lda, pb, sb, ldb, pc, M * N, N, work(h)]);
      }
      run(() => single.sgemm_batched(cut[1], transA, transB, M, N, K, A, sa, lda, B, sb, ldb, C, sc, ldc));
      const out = single.heap();
      for (const [dst, pc, n] of outs) {
        if (sc === M * N && ldc === N) { out.set(mem.subarray(pc, pc + n * M * N * 4), dst); continue; }
        for (let i = 0; i < n; i++) copyRows(dst + i * sc * 4, ldc, pc + i * M * N * 4, N, M, N, out, mem);
      }
    }

    /* Run `kernel` on contiguous ranges of n units (elements, rows), cut at multiples of grain: the calling
     * thread on [0, cut) in place (`own` of the whole, default an equal share; `also`, if given, is more
     * work for it while the helpers run), each helper on its range with its arrays' parts copied into the
     * shared memory. arrays: [ptr, kind, bytes] per pointer argument: "in"/"out"/"inout" are `bytes` a unit
     * and split with the range (outputs copied back), "whole" is `bytes` read whole by every part (copied
     * once); ptr 0 stays 0. args(ptrs, n): the kernel's arguments for n units at those pointers (each at
     * its part's first unit). Every unit is computed by the code that computes it on one thread, so the
     * results are the single-thread kernel's bits. Returns the parts' results, ORed. */
    function split(kernel, n, grain, arrays, args, own, also) {
      const alone = () => {
        const mine = single.exports[kernel](...args(arrays.map(([ptr]) => ptr), n));
        if (also) also();
        return mine | 0;
      };
      return decide(`${kernel}:${n}:${arrays[0][2]}`, alone, () => splitRun(kernel, n, grain, arrays, args, own, also));
    }

    function splitRun(kernel, n, grain, arrays, args, own, also) {
      const heap = single.heap();
      top = arena0;
      team.calls += 1;
      const cut = cuts(n, grain, own);
      const wholes = arrays.map(([ptr, kind, bytes]) => (kind === "whole" && ptr ? copyBytes(heap, ptr, bytes) : 0));
      const outs = [];
      for (let h = 0; h < helpers; h++) {
        const lo = cut[h + 1], m = cut[h + 2] - lo;
        if (m <= 0) { post(h, null); continue; }
        const ptrs = arrays.map(([ptr, kind, bytes], i) => {
          if (!ptr || kind === "whole") return wholes[i];
          const src = ptr + lo * bytes;
          const at = kind === "out" ? alloc(m * bytes) : copyBytes(heap, src, m * bytes);
          if (kind !== "in") outs.push([src, at, m * bytes]);
          return at;
        });
        post(h, kernel, args(ptrs, m));
      }
      let mine = 0;
      const results = run(() => {
        if (cut[1] > 0) mine = single.exports[kernel](...args(arrays.map(([ptr]) => ptr), cut[1]));
        if (also) also();
      });
      copyBack(outs);
      return results.reduce((r, x) => r | x, mine | 0);
    }

    const unary = (kernel) => (x, y, n) => {
      split(kernel, n, 4, [[x, "in", 4], [y, "out", 4]], ([px, py], m) => [px, py, m]);
    };

    /* gelu.c's gradients (dy, x, dx, n): by ranges of elements, as unary */
    const unaryGrad = (kernel) => (dy, x, dx, n) => {
      split(kernel, n, 4, [[dy, "in", 4], [x, "in", 4], [dx, "out", 4]], ([pdy, px, pdx], m) => [pdy, px, pdx, m]);
    };

    /* softmax.c's rows; 1 when a row holds a NaN or an infinity (as the kernel) */
    const softmax = (x, y, rows, n) => split("pytrain_softmax", rows, 1, [[x, "in", 4 * n], [y, "out", 4 * n]],
                                             ([px, py], m) => [px, py, m, n]);

    /* softmax_ce.c's gradient by rows (the loss's rows of a language model's vocabulary: an exponential an
     * element); nonzero when a row declines (as the kernel) */
    const softmaxCeGrad = (logProb, labels, rows, n, coef, dx) => split(
      "pytrain_softmax_ce_grad", rows, 1, [[logProb, "in", 4 * n], [labels, "in", 8], [dx, "out", 4 * n]],
      ([pl, pt, pd], m) => [pl, pt, m, n, coef, pd]);

    const layernorm = (x, scale, bias, y, mean, invStd, rows, n, eps) => {
      split("pytrain_layernorm", rows, 1, [[x, "in", 4 * n], [scale, "whole", 4 * n], [bias, "whole", 4 * n],
                                           [y, "out", 4 * n], [mean, "out", 4], [invStd, "out", 4]],
            ([px, ps, pb, py, pm, pi], m) => [px, ps, pb, py, pm, pi, m, n, eps]);
    };

    /* dx's rows split; dscale and dbias (sums over every row, in row order) stay with the calling thread,
     * which therefore takes fewer rows of dx: the sums take as long as dx (Node, 1024 rows of 128: 0.11 and
     * 0.12 ms), so its share of dx's rows is 2 / count - 1 (none with 2 threads) */
    const layernormGrad = (dy, x, scale, mean, invStd, dx, dscale, dbias, rows, n) => {
      const sums = dscale || dbias;
      if (!dx) { single.layernorm_grad(dy, x, scale, mean, invStd, dx, dscale, dbias, rows, n); return; }
      split("pytrain_layernorm_grad", rows, 1,
            [[dy, "in", 4 * n], [x, "in", 4 * n], [scale, "whole", 4 * n], [mean, "in", 4], [invStd, "in", 4],
             [dx, "out", 4 * n]],
            ([pdy, px, ps, pm, pi, pdx], m) => [pdy, px, ps, pm, pi, pdx, 0, 0, m, n],
            sums ? Math.max(0, 2 / count - 1) : undefined,
            sums ? () => single.layernorm_grad(dy, x, scale, mean, invStd, 0, dscale, dbias, rows, n) : undefined);
    };

    /* optim.c's Adam over a table of `groups` (n, p, g, m, v) rows, split over all the parameters'
     * elements taken in order: each part gets a table of its pieces (the calling thread's table is
     * rewritten in place: the caller's scratch), p, m and v copied back. Each element's update is the
     * same IEEE operations on any path, so the bits are the single thread's. */
    function adam(table, groups, ...scalars) {
      const heap = single.heap();
      const rows = Array.from(new Int32Array(heap.buffer, heap.byteOffset + table, groups * 5));
      let total = 0;
      for (let k = 0; k < groups; k++) total += rows[5 * k];
      if (total < 4 * count) { single.adam(table, groups, ...scalars); return; }
      decide(`adam:${groups}:${total}`, () => single.adam(table, groups, ...scalars),
             () => adamSplit(table, groups, rows, total, scalars));
    }

    function adamSplit(table, groups, rows, total, scalars) {
      const heap = single.heap();
      top = arena0;
      team.calls += 1;
      const cut = cuts(total, 4);
      const pieces = (lo, hi) => {   // [n, p, g, m, v, offset in elements] of every parameter overlapping [lo, hi)
        const out = [];
        for (let k = 0, start = 0; k < groups && start < hi; start += rows[5 * k], k++) {
          const a = Math.max(lo, start), b = Math.min(hi, start + rows[5 * k]);
          if (b > a) out.push([b - a, ...rows.slice(5 * k + 1, 5 * k + 5), a - start]);
        }
        return out;
      };
      const outs = [];
      for (let h = 0; h < helpers; h++) {
        const parts = pieces(cut[h + 1], cut[h + 2]);
        if (!parts.length) { post(h, null); continue; }
        const t = alloc(parts.length * 20);
        const words = [];
        for (const [m, ...ptrs] of parts) {
          const off = ptrs.pop() * 4;
          const copies = ptrs.map((ptr) => copyBytes(heap, ptr + off, m * 4));
          words.push(m, ...copies);
          for (const i of [0, 2, 3]) outs.push([ptrs[i] + off, copies[i], m * 4]);   // p, m, v
        }
        new Int32Array(memory.buffer, t, words.length).set(words);
        post(h, "pytrain_adam", [t, parts.length, ...scalars]);
      }
      const mine = pieces(0, cut[1]).map(([m, p, g, mm, v]) => [m, p, g, mm, v]);
      new Int32Array(heap.buffer, heap.byteOffset + table, mine.length * 5).set([].concat(...mine));
      run(() => { if (mine.length) single.adam(table, mine.length, ...scalars); });
      copyBack(outs);
    }

    function stop() {
      Atomics.store(i32, L.stop, 1);
      seq = (seq + 1) | 0;
      Atomics.store(i32, L.seq, seq);
      Atomics.notify(i32, L.seq);
      workers.forEach((w) => w.stop());
    }

    const team = { count, sgemm, sgemm_batched: single.sgemm_batched ? sgemmBatched : undefined, stop, memory,
                   exp: unary("pytrain_exp"), erf: unary("pytrain_erf"), tanh: unary("pytrain_tanh"), adam, layernorm,
                   layernorm_grad: layernormGrad, softmax, softmax_ce_grad: softmaxCeGrad,
                   gelu_tanh: unary("pytrain_gelu_tanh"), gelu_tanh_grad: unaryGrad("pytrain_gelu_tanh_grad"),
                   gelu_erf: unary("pytrain_gelu_erf"), gelu_erf_grad: unaryGrad("pytrain_gelu_erf_grad"),
                   calls: 0,   // calls: kernel calls split so far
                   keptHits: 0,   // read-only operands found kept in the shared memory instead of copied
                   choices: chooser.stats };   // per call shape: {calls, ms: [alone, split] medians of the last times, seen: [n, n]}
    return team;
  }

  const api = { startThreads, makeChooser };
  if (typeof module === "object" && module.exports) module.exports = api;
  root.pytrainThreadsTeam = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
