// pytrain-ort.js: onnxruntime-web 1.19's training API (TrainingSession, Tensor) on pytrain.
//
//   import * as ort from "./pytrain-ort.js";      // was: import * as ort from "onnxruntime-web/training";
//   const session = await ort.TrainingSession.create({ checkpointState, trainModel, evalModel, optimizerModel });
//   const out = await session.runTrainStep({ input: new ort.Tensor("float32", x, [n, 784]),
//                                            labels: new ort.Tensor("int64", y, [n]) });
//   await session.runOptimizerStep();
//   await session.lazyResetGrad();
//
// The interface is onnxruntime-common's training-session.d.ts. Training runs in pytrain's Web Worker
// (worker.js next to this file, the one the page and the widget use), so the page never freezes; the
// data never leaves the tab. Artifacts: pytrain's (pytrain.artifacts.generate_artifacts); checkpoint:
// pytrain's, or ONNX Runtime 1.19's when the worker's pytrain reads it (pytrain.ort).

// Its worker commands (ortCreate, ortTrainStep, ...) are declared with the others in js/protocol.js (ORT_OPS).
import { WorkerClient, registerServiceWorker } from "./js/client.js";

// onnxruntime-common's Tensor.Type -> typed array.
const TYPED_ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  bool: Uint8Array, string: Array,
};

function typeOfArray(data) {
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof Int8Array) return "int8";
  if (data instanceof Uint8Array || data instanceof Uint8ClampedArray) return "uint8";
  if (data instanceof Int16Array) return "int16";
  if (data instanceof Uint16Array) return "uint16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof Uint32Array) return "uint32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof BigUint64Array) return "uint64";
  return null;
}

/** A CPU tensor with onnxruntime-common's basics: type, data, dims, size. */
export class Tensor {
  /**
   * new Tensor(type, data, dims?) or new Tensor(data, dims?): data is a typed array matching the type,
   * or a plain array (numbers, bigints, booleans or strings) that is converted.
   */
  constructor(arg0, arg1, arg2) {
    let type, data, dims;
    if (typeof arg0 === "string") {
      type = arg0; data = arg1; dims = arg2;
      const T = TYPED_ARRAYS[type];
      if (!T) throw new TypeError(`Unsupported tensor type: ${type}.`);
      if (Array.isArray(data)) {
        if (type === "string") { /* kept as an array of strings */ }
        else if (type === "int64" || type === "uint64") data = T.from(data, (v) => BigInt(v));
        else if (type === "bool") data = Uint8Array.from(data, (v) => (v ? 1 : 0));
        else data = T.from(data);
      } else if (type === "uint8" && data instanceof Uint8ClampedArray) {
        data = new Uint8Array(data.buffer, data.byteOffset, data.length);
      } else if (!(data instanceof T)) {
        throw new TypeError(`A ${T.name} tensor's data must be type of ${T.name}`);
      }
    } else {
      data = arg0; dims = arg1;
      if (Array.isArray(data)) {
        if (data.length === 0) throw new TypeError("Tensor type cannot be inferred from an empty array.");
        const first = data[0];
        if (typeof first === "string") type = "string";
        else if (typeof first === "boolean") { type = "bool"; data = Uint8Array.from(data, (v) => (v ? 1 : 0)); }
        else { type = "float32"; data = Float32Array.from(data); }
      } else {
        type = typeOfArray(data);
        if (!type) throw new TypeError("Invalid tensor data: expected a typed array or an array");
        if (data instanceof Uint8ClampedArray) data = new Uint8Array(data.buffer, data.byteOffset, data.length);
      }
    }
    if (dims === undefined) dims = [data.length];
    else if (!Array.isArray(dims)) throw new TypeError("A tensor's dims must be a number array");
    dims = dims.map((d) => {
      if (!Number.isSafeInteger(d) || d < 0) throw new TypeError(`Invalid dimension: ${d}`);
      return d;
    });
    const size = dims.reduce((a, b) => a * b, 1);
    if (size !== data.length) throw new Error(`Tensor's size(${size}) does not match data length(${data.length}).`);
    this.type = type;
    this.dims = dims;
    this.data = data;
    this.size = size;
    this.location = "cpu";
  }

  get cpuData() { return this.data; }

  async getData(releaseData) {
    const d = this.data;
    if (releaseData) this.dispose();
    return d;
  }

  reshape(dims) { return new Tensor(this.type, this.data, dims); }

  dispose() { this.data = undefined; this.location = "none"; }
}

/** Accepted for compatibility (pages set ort.env.wasm.*); pytrain's worker ignores these settings. */
export const env = { wasm: { numThreads: 0, simd: true, proxy: false, wasmPaths: undefined }, webgpu: {},
                     logLevel: "warning", debug: false, trace: false, versions: { common: "1.19.2", web: "1.19.2" } };

// ------------------------------------------------------------------ the shared worker

let client = null;

/** The one pytrain worker every TrainingSession of this page talks to (started on first use). */
function worker() {
  if (!client) client = new WorkerClient({ startAfter: registerServiceWorker() });
  return client;
}

/** A worker command; rejects (instead of waiting forever) when Python cannot start in this tab. */
function call(cmd, args) {
  const c = worker();
  return Promise.race([c.call(cmd, args), c.ready.then(() => new Promise(() => {}))]);
}

async function toBytes(src, what) {
  if (src instanceof Uint8Array) return src;
  if (src instanceof ArrayBuffer) return new Uint8Array(src);
  if (typeof src === "string" || src instanceof URL) {
    const base = typeof document !== "undefined" ? document.baseURI : self.location.href;
    const resp = await fetch(new URL(src, base));
    if (!resp.ok) throw new Error(`${what}: ${src} answered HTTP ${resp.status}`);
    return new Uint8Array(await resp.arrayBuffer());
  }
  throw new TypeError(`${what}: expected a URL string or a Uint8Array`);
}

/** The tensor as the worker takes it: {type, dims, data: its bytes}. */
function encodeTensor(t, what) {
  if (!t || typeof t !== "object" || !("data" in t) || !("dims" in t) || !("type" in t)) {
    throw new TypeError(`${what} must be a Tensor`);
  }
  if (t.type === "string") throw new TypeError(`${what}: string tensors are not supported by pytrain`);
  if (!ArrayBuffer.isView(t.data)) throw new TypeError(`${what}: the tensor's data is not on the CPU`);
  let bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  // postMessage clones a view's whole buffer: send only this tensor's bytes.
  if (bytes.byteOffset !== 0 || bytes.byteLength !== bytes.buffer.byteLength) bytes = bytes.slice();
  return { type: t.type, dims: Array.from(t.dims), data: bytes };
}

function decodeTensor(m) {
  const T = TYPED_ARRAYS[m.type];
  const u8 = m.data;   // a fresh copy from the worker (byteOffset 0): safe to view as T
  const data = T === Uint8Array ? u8 : new T(u8.buffer, u8.byteOffset, u8.byteLength / T.BYTES_PER_ELEMENT);
  return new Tensor(m.type, data, m.dims);
}

/** onnxruntime-common's argument narrowing: (feeds, fetches?, options?) -> (names to return, prefilled). */
function narrow(inputNames, outputNames, feeds, arg1, arg2) {
  if (typeof feeds !== "object" || feeds === null || feeds instanceof Tensor || Array.isArray(feeds)) {
    throw new TypeError("'feeds' must be an object that use input names as keys and OnnxValue as corresponding values.");
  }
  const fetches = {};
  let explicit = false;
  if (typeof arg1 === "object") {
    if (arg1 === null) throw new TypeError("Unexpected argument[1]: cannot be null.");
    if (arg1 instanceof Tensor) throw new TypeError("'fetches' cannot be a Tensor");
    if (Array.isArray(arg1)) {
      if (arg1.length === 0) throw new TypeError("'fetches' cannot be an empty array.");
      for (const name of arg1) {
        if (typeof name !== "string") throw new TypeError("'fetches' must be a string array or an object.");
        if (!outputNames.includes(name)) throw new RangeError(`'fetches' contains invalid output name: ${name}.`);
        fetches[name] = null;
      }
      explicit = true;
    } else {
      // an object naming outputs (null or a Tensor to fill) is fetches; anything else is run options
      for (const name of outputNames) {
        if (Object.prototype.hasOwnProperty.call(arg1, name) && (arg1[name] === null || arg1[name] instanceof Tensor)) {
          fetches[name] = arg1[name];
          explicit = true;
        }
      }
    }
    if (explicit && arg2 !== undefined && (typeof arg2 !== "object" || arg2 === null)) {
      throw new TypeError("'options' must be an object.");
    }
  } else if (arg1 !== undefined) {
    throw new TypeError("Unexpected argument[1]: must be 'fetches' or 'options'.");
  }
  for (const name of inputNames) {
    if (feeds[name] === undefined) throw new Error(`input '${name}' is missing in 'feeds'.`);
  }
  if (!explicit) for (const name of outputNames) fetches[name] = null;
  return fetches;
}

function collect(results, fetches) {
  const out = {};
  for (const [name, given] of Object.entries(fetches)) {
    const t = decodeTensor(results[name]);
    if (given) {   // a preallocated output: filled in place, as onnxruntime-web does
      if (given.type !== t.type || given.size !== t.size) {
        throw new Error(`output '${name}': the preallocated tensor is ${given.type}[${given.dims}], the result ${t.type}[${t.dims}]`);
      }
      given.data.set(t.data);
      out[name] = given;
    } else out[name] = t;
  }
  return out;
}

/** onnxruntime-web's TrainingSession, trained by pytrain in its Web Worker. */
export class TrainingSession {
  constructor(id, names, hasEval, hasOptimizer) {
    this._id = id;
    this._names = names;
    this._hasEval = hasEval;
    this._hasOptimizer = hasOptimizer;
  }

  /**
   * create({checkpointState, trainModel, evalModel?, optimizerModel?}, sessionOptions?): each a URL or a
   * Uint8Array. sessionOptions (execution providers, threads...) are accepted and ignored.
   */
  static async create(trainingOptions, sessionOptions) {   // eslint-disable-line no-unused-vars
    if (!trainingOptions || typeof trainingOptions !== "object") {
      throw new TypeError("TrainingSession.create takes {checkpointState, trainModel, evalModel, optimizerModel}");
    }
    const { checkpointState, trainModel, evalModel, optimizerModel } = trainingOptions;
    if (!checkpointState || !trainModel) throw new TypeError("checkpointState and trainModel are required");
    const [checkpoint, train, evalBytes, optimizer] = await Promise.all([
      toBytes(checkpointState, "checkpointState"), toBytes(trainModel, "trainModel"),
      evalModel ? toBytes(evalModel, "evalModel") : null, optimizerModel ? toBytes(optimizerModel, "optimizerModel") : null,
    ]);
    const r = await call("ortCreate", {
      checkpoint, train_model: train, eval_model: evalBytes || undefined, optimizer_model: optimizer || undefined,
    });
    const names = {
      trainingInputNames: Object.freeze(r.trainingInputNames), trainingOutputNames: Object.freeze(r.trainingOutputNames),
      evalInputNames: Object.freeze(r.evalInputNames), evalOutputNames: Object.freeze(r.evalOutputNames),
    };
    return new TrainingSession(r.session, names, !!evalModel, !!optimizerModel);
  }

  get trainingInputNames() { return this._names.trainingInputNames; }
  get trainingOutputNames() { return this._names.trainingOutputNames; }
  get evalInputNames() {
    if (!this._hasEval) throw new Error("This training session has no evalModel loaded.");
    return this._names.evalInputNames;
  }
  get evalOutputNames() {
    if (!this._hasEval) throw new Error("This training session has no evalModel loaded.");
    return this._names.evalOutputNames;
  }

  _call(cmd, args = {}) {
    if (this._id === null) return Promise.reject(new Error("this TrainingSession was released"));
    return call(cmd, Object.assign({ session: this._id }, args));
  }

  async _step(cmd, inputNames, outputNames, feeds, arg1, arg2) {
    const fetches = narrow(inputNames, outputNames, feeds, arg1, arg2);
    const encoded = {};
    for (const [name, t] of Object.entries(feeds)) {
      if (!inputNames.includes(name)) throw new Error(`invalid input '${name}'`);
      encoded[name] = encodeTensor(t, `input "${name}"`);
    }
    const results = await this._call(cmd, { feeds: encoded });
    return collect(results, fetches);
  }

  /** runTrainStep(feeds, fetches?, options?): forward, loss and backward; gradients accumulate until lazyResetGrad. */
  runTrainStep(feeds, arg1, arg2) {
    return this._step("ortTrainStep", this.trainingInputNames, this.trainingOutputNames, feeds, arg1, arg2);
  }

  /** runEvalStep(feeds, fetches?, options?) on the eval model. */
  runEvalStep(feeds, arg1, arg2) {
    if (!this._hasEval) return Promise.reject(new Error("This TrainingSession has no EvalModel loaded."));
    return this._step("ortEvalStep", this.evalInputNames, this.evalOutputNames, feeds, arg1, arg2);
  }

  async runOptimizerStep(options) {   // eslint-disable-line no-unused-vars
    if (!this._hasOptimizer) throw new Error("This TrainingSession has no OptimizerModel loaded.");
    await this._call("ortOptimizerStep");
  }

  async lazyResetGrad() { await this._call("ortLazyResetGrad"); }

  async getParametersSize(trainableOnly = true) {
    return this._call("ortParametersSize", { trainable_only: !!trainableOnly });
  }

  /** A float32 Tensor [size] of the parameters, in the training model's order (federated learning's hook). */
  async getContiguousParameters(trainableOnly = true) {
    return decodeTensor(await this._call("ortGetParameters", { trainable_only: !!trainableOnly }));
  }

  /** Copy the parameters from a Uint8Array holding float32 values (getContiguousParameters' layout). */
  async loadParametersBuffer(buffer, trainableOnly = true) {
    if (!(buffer instanceof Uint8Array)) throw new TypeError("loadParametersBuffer takes a Uint8Array of float32 values");
    const size = await this.getParametersSize(trainableOnly);
    if (buffer.length !== 4 * size) {
      throw new Error("Size of the buffer passed into loadParametersBuffer must match the number of parameters in " +
                      "the model. Please use getParametersSize method to check.");
    }
    const bytes = buffer.byteOffset === 0 && buffer.byteLength === buffer.buffer.byteLength ? buffer : buffer.slice();
    await this._call("ortLoadParameters", { buffer: bytes, trainable_only: !!trainableOnly });
  }

  async release() {
    if (this._id === null) return;
    await this._call("ortRelease");
    this._id = null;
  }
}

export default { TrainingSession, Tensor, env };
