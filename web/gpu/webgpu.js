/* pytrain's WebGPU device: GPU buffers held by id, WGSL compute shaders, and the asynchronous
 * readback, for Python's plan (pytrain/ops/webgpu) to drive through Pyodide's JS bridge.
 *
 * Pyodide 0.17 cannot await inside a synchronous call, so nothing here that Python calls waits:
 * alloc/free/write/dispatch only record or enqueue work (queue.writeBuffer and queue.submit do
 * not block), and readInto(id, ptr, bytes) enqueues a copy into a mappable buffer whose
 * mapAsync promise later writes the bytes into Pyodide's heap at ptr. The worker's JS awaits
 * settle() between training slices (when Python has returned), after which Python reads the
 * losses it asked for. Every kernel is one thread per output element (or per row), each summing
 * in index order, so the numbers are those of a plain float32 loop.
 *
 * A kernel (here, or added with PytrainGPU.addKernels from another file) is [tensor bindings, workgroup
 * size, body]: the body is the statements of its main(g), compiled after PRELUDE below, which declares
 * the parameters P and the helpers every shader shares (pf, flat, win, tap_in, tap_out).
 *
 *   const gpu = await PytrainGPU.create(() => pyodide._module.HEAPU8);   // null: no adapter (gpu.reason says why)
 *   gpu.registerWithPyodide(pyodide);        // Python: import pytrain_webgpu
 *   await gpu.settle();                      // after Python enqueued a slice
 */
(function (root) {
  "use strict";

  // PRELUDE, the one piece every kernel is compiled with (WGSL has no include): its parameters P, a read-only
  // array<u32> at @binding(0) (floats as their bits: storage arrays need no uniform padding; its tensors follow at
  // bindings 1... in the order Python passes, declared T1, T2, ... by source()), and the index helpers:
  //   pf(i)       parameter i as a float
  //   flat(g)     this thread's element: x workgroups carried into y past 65535 (Device.dispatch in Python)
  //   at(i, rank, dims, strides)  the offset of row-major element i of the shape P[dims..] in a tensor whose
  //               strides along those axes are P[strides..] (0: broadcast), in elements
  //   win()       a 2-D window's parameters, P[0..16] (see Win) as the CNN kernels are given them
  //   tap_in(o, k, s, d, p)      the input row/column output o's tap k reads (< 0 or >= size: a pad)
  //   tap_out(x, k, s, d, p, n)  the output whose tap k reads input x, or -1 (between strides, or outside 0..n)
  // A body is the statements of `fn main(@builtin(global_invocation_id) g: vec3<u32>)` at the kernel's workgroup
  // size, which source() wraps around it; a kernel's own WGSL functions, if any, are its fourth element.
  const PRELUDE = `@group(0) @binding(0) var<storage, read> P: array<u32>;
fn pf(i: u32) -> f32 { return bitcast<f32>(P[i]); }
fn flat(g: vec3<u32>) -> u32 { return g.x + g.y * 65535u * 64u; }
struct Win { n: u32, c: u32, m: u32, flag: u32, inH: u32, inW: u32, outH: u32, outW: u32, kH: u32, kW: u32,
  sH: u32, sW: u32, dH: u32, dW: u32, pH: u32, pW: u32, groups: u32 }
fn win() -> Win {
  return Win(P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13], P[14], P[15], P[16]);
}
fn at(i: u32, rank: u32, dims: u32, strides: u32) -> u32 {
  var rest = i; var o = 0u;
  for (var d = 0u; d < rank; d = d + 1u) {
    let axis = rank - 1u - d;
    let dim = P[dims + axis];
    o = o + (rest % dim) * P[strides + axis]; rest = rest / dim;
  }
  return o;
}
fn tap_in(o: u32, k: u32, s: u32, d: u32, p: u32) -> i32 { return i32(o * s + k * d) - i32(p); }
fn tap_out(x: u32, k: u32, s: u32, d: u32, p: u32, n: u32) -> i32 {
  let t = i32(x) + i32(p) - i32(k * d);
  if (t < 0 || t % i32(s) != 0 || u32(t) / s >= n) { return -1; }
  return t / i32(s);
}
`;

  // op(A)[row, :] . op(B)[:, col] over k, in order, A's matrix at T1[oa], B's at T2[ob] (P[3], P[4]: transposed):
  // the one loop of the products (matmul here, matmul_nd in shaders_text.js), a kernel's own function
  const MATMUL_DOT = `
fn dot_rc(oa: u32, ob: u32, row: u32, col: u32, m: u32, n: u32, k: u32) -> f32 {
  var acc = 0.0;
  for (var i = 0u; i < k; i = i + 1u) {
    var a: f32; var w: f32;
    if (P[3] == 1u) { a = T1[oa + i * m + row]; } else { a = T1[oa + row * k + i]; }
    if (P[4] == 1u) { w = T2[ob + col * k + i]; } else { w = T2[ob + i * n + col]; }
    acc = acc + a * w;
  }
  return acc;
}
`;

  // name -> [tensor bindings ("r" read, "w" read_write, "ri" read i32), workgroup size, body, its own functions]
  const KERNELS = {
    // C[b] = alpha * op(A[b]) @ op(B[b]) (+ bias): P = m, n, k, transA, transB, biasKind (0 none, 1 row of n,
    // 2 (m, n), 3 scalar), alpha, strideA, strideB (elements per batch; 0 broadcasts), strideC
    matmul: [["r", "r", "r", "w"], [8, 8, 1], `
  let m = P[0]; let n = P[1]; let k = P[2];
  let row = g.y; let col = g.x; let b = g.z;
  if (row >= m || col >= n) { return; }
  let oa = b * P[7]; let ob = b * P[8];
  let acc = dot_rc(oa, ob, row, col, m, n, k);
  var y = acc;
  if (pf(6) != 1.0) { y = pf(6) * acc; }
  if (P[5] == 1u) { y = y + T3[col]; } else if (P[5] == 2u) { y = y + T3[row * n + col]; }
  else if (P[5] == 3u) { y = y + T3[0]; }
  T4[b * P[9] + row * n + col] = y;`, MATMUL_DOT],
    // Y = A op B with numpy broadcasting: P = op (0 + 1 - 2 * 3 /), size, rank, then rank output dims,
    // rank strides of A, rank strides of B (0 along a broadcast axis)
    binary: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[1]) { return; }
  let rank = P[2];
  let a = T1[at(i, rank, 3u, 3u + rank)]; let b = T2[at(i, rank, 3u, 3u + 2u * rank)];
  var y: f32;
  switch (P[0]) {
    case 0u: { y = a + b; }
    case 1u: { y = a - b; }
    case 2u: { y = a * b; }
    default: { y = a / b; }
  }
  T3[i] = y;`],
    // P = size
    relu: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  T2[i] = max(T1[i], 0.0);`],
    // dX = dY where Y > 0 else 0 (selected, never multiplied: an inf upstream does not leak through a dead unit)
    relu_grad: [["r", "r", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  T3[i] = select(0.0, T1[i], T2[i] > 0.0);`],
    // Y[o, j] = sum over r of X[o, r, j] in order (times P[3]: ReduceMean's 1 / count); X viewed as (outer,
    // reduced, inner); P = outer, reduced, inner, scale
    reduce_sum: [["r", "w"], [64, 1, 1], `
  let i = flat(g);
  let inner = P[2]; let red = P[1];
  if (i >= P[0] * inner) { return; }
  let o = i / inner; let j = i % inner;
  var acc = 0.0;
  for (var r = 0u; r < red; r = r + 1u) { acc = acc + T1[(o * red + r) * inner + j]; }
  if (pf(3) != 1.0) { acc = acc * pf(3); }
  T2[i] = acc;`],
    // Per row of (N, C) scores: log_prob = x - max - log(sum exp(x - max)); row loss -log_prob[label] and its
    // weight (0 for ignore_index) into W (2 N floats). P = N, C, hasIgnore, ignoreIndex (i32 bits)
    softmax_ce_rows: [["r", "ri", "w", "w"], [64, 1, 1], `
  let r = g.x;
  let n = P[0]; let c = P[1];
  if (r >= n) { return; }
  var mx = T1[r * c];
  for (var j = 1u; j < c; j = j + 1u) { mx = max(mx, T1[r * c + j]); }
  var s = 0.0;
  for (var j = 0u; j < c; j = j + 1u) { s = s + exp(T1[r * c + j] - mx); }
  let lse = log(s);
  for (var j = 0u; j < c; j = j + 1u) { T3[r * c + j] = T1[r * c + j] - mx - lse; }
  let label = T2[r];
  if (P[2] == 1u && label == bitcast<i32>(P[3])) { T4[r] = 0.0; T4[n + r] = 0.0; return; }
  T4[r] = -T3[r * c + u32(label)]; T4[n + r] = 1.0;`],
    // loss = sum of the row losses (in order), divided for "mean" by the summed weights. P = N, mean
    softmax_ce_total: [["r", "w"], [1, 1, 1], `
  let n = P[0];
  var s = 0.0; var w = 0.0;
  for (var r = 0u; r < n; r = r + 1u) { s = s + T1[r]; w = w + T1[n + r]; }
  if (P[1] == 1u) { s = s / w; }
  T2[0] = s;`],
    // the samples not ignored, counted once for the gradient's mean: P = N, ignoreIndex
    softmax_ce_count: [["ri", "w"], [1, 1, 1], `
  var total = 0.0;
  for (var q = 0u; q < P[0]; q = q + 1u) { if (T1[q] != bitcast<i32>(P[1])) { total = total + 1.0; } }
  T2[0] = total;`],
    // dScores = coef * w * (exp(log_prob) - onehot(label)), coef = dLoss (/ summed weights for "mean": N, or
    // T5[0] from softmax_ce_count when labels may be ignored).
    // P = N, C, mean, hasIgnore, ignoreIndex, dLoss bits, dLossInBuffer (then T4[0] is dLoss)
    softmax_ce_grad: [["r", "ri", "w", "r", "r"], [64, 1, 1], `
  let i = flat(g);
  let n = P[0]; let c = P[1];
  if (i >= n * c) { return; }
  let r = i / c; let j = i % c;
  var d = pf(5);
  if (P[6] == 1u) { d = T4[0]; }
  var total = f32(n);
  if (P[3] == 1u) { total = T5[0]; }
  let label = T2[r];
  if (P[3] == 1u && label == bitcast<i32>(P[4])) { T3[i] = 0.0; return; }
  var y = exp(T1[i]);
  if (u32(label) == j) { y = y - 1.0; }
  var coef = d;
  if (P[2] == 1u) { coef = select(0.0, d * (1.0 / total), total != 0.0); }
  if (coef != 1.0) { y = y * coef; }
  T3[i] = y;`],
    // torch's Adam/AdamW in place, the float32 operations of pytrain's numpy update in its order.
    // P = size, b1, 1-b1, b2, 1-b2, 1/sqrt(1-b2^t), eps, lr/(1-b1^t), decayKind (0, 1 AdamW, 2 Adam L2), decay
    adam: [["w", "r", "w", "w"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  var p = T1[i]; var gr = T2[i];
  if (P[8] == 1u) { p = p * pf(9); } else if (P[8] == 2u) { gr = gr + pf(9) * p; }
  let m = T3[i] * pf(1) + gr * pf(2);
  let v = T4[i] * pf(3) + (gr * gr) * pf(4);
  T3[i] = m; T4[i] = v;
  var t = sqrt(v) * pf(5);
  t = t + pf(6);
  t = (m / t) * pf(7);
  T1[i] = p - t;`],
    // plain SGD in place: p -= lr * g. P = size, lr
    sgd: [["w", "r"], [64, 1, 1], `
  let i = flat(g);
  if (i >= P[0]) { return; }
  T1[i] = T1[i] - pf(1) * T2[i];`],
  };

  function source(name) {
    const [bindings, size, body, helpers] = KERNELS[name];
    const decl = bindings.map((b, j) => "@group(0) @binding(" + (j + 1) + ") var<storage, " +
      (b[0] === "w" ? "read_write" : "read") + "> T" + (j + 1) + ": array<" + (b.length > 1 ? "i32" : "f32") + ">;\n");
    return PRELUDE + decl.join("") + (helpers || "") + "@compute @workgroup_size(" + size.join(", ") +
      ")\nfn main(@builtin(global_invocation_id) g: vec3<u32>) {" + body + "\n}\n";
  }

  class PytrainGPU {
    constructor(adapter, device, info, heap) {
      this.heap = heap;             // () => the Uint8Array of Pyodide's heap now (it is replaced when it grows)
      this.nextId = 1;
      this.counts = { dispatches: 0, uploads: 0, uploadBytes: 0, readbacks: 0, readbackBytes: 0 };
      this.renewals = 0;            // new devices after a loss (renew)
      this.attach(adapter, device, info);
    }

    /** Train on `device` (of `adapter`): no buffers yet. Buffer ids go on counting, so a handle of a lost device's
     * buffer never names one of this device's. */
    attach(adapter, device, info) {
      this.adapter = adapter;
      this.device = device;
      this.name = PytrainGPU.describe(info);
      this.software = PytrainGPU.isSoftware(adapter, info);
      this.limits = { maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
                      maxBufferSize: device.limits.maxBufferSize };
      this.buffers = new Map();     // id -> GPUBuffer
      this.pool = new Map();        // size -> freed GPUBuffers to reuse
      this.pipelines = new Map();
      this.pending = [];
      this.encoder = null;          // dispatches recorded, not submitted yet (flush)
      this.errors = [];
      this.lost = null;
      this.empty = this.make(4);    // bound where a kernel's optional tensor is absent
      // (a lost device's events after its replacement are not this one's)
      const mine = () => this.device === device;
      device.addEventListener("uncapturederror", (e) => { if (mine()) this.errors.push(e.error.message); });
      device.lost.then((info) => { if (mine()) this.lost = info.message || info.reason || "device lost"; });
    }

    /** After a loss: a new adapter and device asked of navigator.gpu again, trained on by this same object (Python's
     * Device goes on with it; what the lost one held is gone, its handles only free). Throws when none can be had. */
    async renew() {
      const gpu = typeof navigator !== "undefined" ? navigator.gpu : undefined;
      if (!gpu) throw new Error("this browser has no WebGPU (navigator.gpu)");
      const adapter = await gpu.requestAdapter();
      if (!adapter) throw new Error("WebGPU gave no adapter");
      const info = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
      const limits = { maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
                       maxBufferSize: adapter.limits.maxBufferSize };
      const device = await adapter.requestDevice({ requiredLimits: limits });
      this.attach(adapter, device, info);
      this.renewals++;
    }

    /** The device, or null with PytrainGPU.reason saying why (no navigator.gpu, no adapter, or only a software
     * adapter such as SwiftShader, slower than the wasm kernels: used only with `software: true`, the user's
     * explicit choice). */
    static async create(heap, { software = false } = {}) {
      const gpu = typeof navigator !== "undefined" ? navigator.gpu : undefined;
      if (!gpu) { PytrainGPU.reason = "this browser has no WebGPU (navigator.gpu)"; return null; }
      const adapter = await gpu.requestAdapter();
      if (!adapter) { PytrainGPU.reason = "WebGPU gave no adapter"; return null; }
      const info = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
      if (PytrainGPU.isSoftware(adapter, info) && !software) {
        PytrainGPU.reason = "the only WebGPU adapter is a software one (" + PytrainGPU.describe(info) +
          "), slower than the CPU's wasm kernels: turn the GPU on to use it anyway";
        return null;
      }
      const limits = { maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
                       maxBufferSize: adapter.limits.maxBufferSize };
      const device = await adapter.requestDevice({ requiredLimits: limits });
      return new PytrainGPU(adapter, device, info, heap);
    }

    /** A fallback (CPU-emulated) adapter: Chromium's SwiftShader says info.isFallbackAdapter (older ones
     * adapter.isFallbackAdapter); Mesa's llvmpipe/lavapipe and Windows' WARP by name. */
    static isSoftware(adapter, info) {
      return !!(info.isFallbackAdapter || adapter.isFallbackAdapter) ||
        /swiftshader|llvmpipe|lavapipe|microsoft basic render|warp/i.test(PytrainGPU.describe(info));
    }

    static describe(info) {
      return [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") || "WebGPU adapter";
    }

    make(size) {
      return this.device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC |
        GPUBufferUsage.COPY_DST });
    }

    /** A buffer of at least `bytes` (a freed one of that size when there is one); its id. */
    alloc(bytes) {
      const size = Math.max(4, Math.ceil(bytes / 4) * 4);
      if (size > this.limits.maxStorageBufferBindingSize) {
        throw new Error("a tensor of " + size + " bytes exceeds this GPU's maxStorageBufferBindingSize (" +
                        this.limits.maxStorageBufferBindingSize + ")");
      }
      const free = this.pool.get(size);
      const buf = free && free.length ? free.pop() : this.make(size);
      const id = this.nextId++;
      this.buffers.set(id, buf);
      return id;
    }

    /** Back to the pool: work already enqueued that reads it runs before any later use (one queue). */
    free(id) {
      const buf = this.buffers.get(id);
      if (!buf) return;
      this.buffers.delete(id);
      if (!this.pool.has(buf.size)) this.pool.set(buf.size, []);
      this.pool.get(buf.size).push(buf);
    }

    /** Copy `bytes` of Pyodide's heap at `ptr` into buffer `id` (enqueued: the heap may change after). */
    write(id, ptr, bytes) {
      if (this.lost) return;   // (settle() reports it: Python never gets an exception mid-step)
      this.flush();
      const padded = Math.ceil(bytes / 4) * 4;
      let data = this.heap().subarray(ptr, ptr + bytes);
      if (padded !== bytes) { const p = new Uint8Array(padded); p.set(data); data = p; }
      if (padded) this.device.queue.writeBuffer(this.buffers.get(id), 0, data, 0, padded);
      this.counts.uploads++;
      this.counts.uploadBytes += bytes;
    }

    /** Enqueue the zeroing of buffer `id` (a new tensor of zeros made on the GPU: nothing crosses from the heap). */
    zero(id) {
      if (this.lost) return;
      if (!this.encoder) this.encoder = this.device.createCommandEncoder();
      this.encoder.clearBuffer(this.buffers.get(id));
    }

    /** Enqueue a copy of buffer `id`'s first `bytes` to Pyodide's heap at `ptr`, done once settle() resolves. */
    readInto(id, ptr, bytes, offset = 0) {
      if (this.lost) { this.pending.push(Promise.reject(new Error("the GPU device was lost: " + this.lost))); return; }
      const size = Math.max(4, Math.ceil(bytes / 4) * 4);
      const staging = this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      if (!this.encoder) this.encoder = this.device.createCommandEncoder();
      this.encoder.copyBufferToBuffer(this.buffers.get(id), offset, staging, 0, size);
      this.flush();
      this.counts.readbacks++;
      this.counts.readbackBytes += bytes;
      this.pending.push(staging.mapAsync(GPUMapMode.READ).then(() => {
        this.heap().set(new Uint8Array(staging.getMappedRange(), 0, bytes), ptr);
        staging.destroy();
      }));
    }

    pipeline(name) {
      let p = this.pipelines.get(name);
      if (!p) {
        const module = this.device.createShaderModule({ code: source(name) });
        p = this.device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
        this.pipelines.set(name, p);
      }
      return p;
    }

    /** Enqueue kernel `name` on a (gx, gy, gz) grid of workgroups over the tensors `ids` (0: absent) with the
     * u32 parameters `params` (a float passed as its bits). */
    dispatch(name, gx, gy, gz, ids, params) {
      if (this.lost) return;   // (settle() reports it)
      const spec = KERNELS[name];
      if (!spec) throw new Error("no WebGPU kernel " + name);
      const pbuf = this.device.createBuffer({ size: Math.max(4, params.length * 4), usage: GPUBufferUsage.STORAGE,
                                              mappedAtCreation: true });
      new Uint32Array(pbuf.getMappedRange()).set(params);
      pbuf.unmap();
      const entries = [{ binding: 0, resource: { buffer: pbuf } }];
      ids.forEach((id, j) => {
        const buf = id ? this.buffers.get(id) : this.empty;
        if (!buf) throw new Error("WebGPU kernel " + name + ": tensor " + id + " was freed");
        entries.push({ binding: j + 1, resource: { buffer: buf } });
      });
      const pipe = this.pipeline(name);
      if (!this.encoder) this.encoder = this.device.createCommandEncoder();
      const pass = this.encoder.beginComputePass();
      pass.setPipeline(pipe);
      pass.setBindGroup(0, this.device.createBindGroup({ layout: pipe.getBindGroupLayout(0), entries }));
      pass.dispatchWorkgroups(gx, gy, gz);
      pass.end();
      this.counts.dispatches++;
    }

    /** Submit the dispatches recorded since the last submit: before a queue.writeBuffer (which would
     * otherwise run before them), a readback and a settle. */
    flush() {
      if (!this.encoder) return;
      this.device.queue.submit([this.encoder.finish()]);
      this.encoder = null;
    }

    /** Python's entry (Pyodide 0.17 passes plain numbers, not lists):
     * call(name, gx, gy, gz, nIds, ...ids, ...params). */
    call(name, gx, gy, gz, nIds, ...rest) {
      return this.dispatch(name, gx, gy, gz, rest.slice(0, nIds), rest.slice(nIds));
    }

    /** Resolves when every readback enqueued so far is in the heap; rejects with the first GPU error. */
    async settle() {
      this.flush();
      while (this.pending.length) await Promise.all(this.pending.splice(0));
      await this.device.queue.onSubmittedWorkDone();
      if (this.errors.length) throw new Error("WebGPU: " + this.errors.splice(0).join("; "));
      if (this.lost) throw new Error("the GPU device was lost: " + this.lost);
    }

    /** Make `import pytrain_webgpu` in Python this device. */
    registerWithPyodide(pyodide, name = "pytrain_webgpu") {
      const self = this;
      pyodide.registerJsModule(name, {
        adapter: this.name, max_binding: this.limits.maxStorageBufferBindingSize, max_buffer: this.limits.maxBufferSize,
        alloc: (b) => self.alloc(b), free: (id) => self.free(id), write: (id, p, b) => self.write(id, p, b),
        zero: (id) => self.zero(id),
        read_into: (id, p, b) => self.readInto(id, p, b), call: (...a) => self.call(...a),
        counts: () => JSON.stringify(self.counts),
      });
    }
  }

  PytrainGPU.reason = "";
  /** More kernels (gpu/shaders_nn.js: the CNN's and the embedding models'), by name as in KERNELS. */
  PytrainGPU.MATMUL_DOT = MATMUL_DOT;
  PytrainGPU.addKernels = (more) => { Object.assign(KERNELS, more); PytrainGPU.KERNELS = Object.keys(KERNELS); };
  PytrainGPU.KERNELS = Object.keys(KERNELS);
  root.PytrainGPU = PytrainGPU;
})(typeof globalThis !== "undefined" ? globalThis : this);
