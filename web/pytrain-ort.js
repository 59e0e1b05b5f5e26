// pytrain-ort.js: onnxruntime-web 1.19's API (TrainingSession, InferenceSession, Tensor, env) on pytrain.
//
//   import * as ort from "./pytrain-ort.js";      // was: import * as ort from "onnxruntime-web/training";
//   const session = await ort.TrainingSession.create({ checkpointState, trainModel, evalModel, optimizerModel });
//   const out = await session.runTrainStep({ input: new ort.Tensor("float32", x, [n, 784]),
//                                            labels: new ort.Tensor("int64", y, [n]) });
//   await session.runOptimizerStep();
//   await session.lazyResetGrad();
//
// The interface is onnxruntime-common 1.19's (training-session.d.ts, inference-session.d.ts, tensor*.d.ts);
// its types: pytrain-ort.d.ts. Training runs in pytrain's Web Worker (worker.js next to this file, the one
// the page and the widget use), so the page never freezes; the data never leaves the tab. Artifacts and
// checkpoints: pytrain's, or those ONNX Runtime 1.19's generate_artifacts made, read by pytrain.ort as in
// Python. InferenceSession runs an exported model (create from a URL or bytes, run(feeds) -> outputs);
// Tensor and Tensor.fromImage (onnxruntime-common 1.19's semantics) live in js/ort_tensor.js.

// Its worker commands (ortCreate, ortTrainStep, ...) are declared with the others in js/protocol.js (ORT_OPS).
import { WorkerClient, registerServiceWorker } from "./js/client.js";
import { Tensor, TYPED_ARRAYS } from "./js/ort_tensor.js";

export { Tensor };

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
  if (src instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && src instanceof SharedArrayBuffer)) {
    return new Uint8Array(src);
  }
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

/** onnxruntime-web's InferenceSession (an exported model, for instance), run by pytrain in its Web Worker. */
export class InferenceSession {
  constructor(id, inputNames, outputNames) {
    this._id = id;
    this.inputNames = Object.freeze(inputNames);
    this.outputNames = Object.freeze(outputNames);
  }

  /**
   * create(url | Uint8Array | ArrayBuffer, options?) or create(ArrayBuffer, byteOffset, byteLength?, options?),
   * as onnxruntime-common's InferenceSession.create; session options are accepted and ignored.
   */
  static async create(arg0, arg1, arg2, arg3) {   // eslint-disable-line no-unused-vars
    let model;
    if (typeof arg0 === "string" || arg0 instanceof Uint8Array) model = await toBytes(arg0, "InferenceSession.create");
    else if (arg0 instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && arg0 instanceof SharedArrayBuffer)) {
      let byteOffset = 0, byteLength = arg0.byteLength;
      if (typeof arg1 === "number") {
        byteOffset = arg1;
        if (!Number.isSafeInteger(byteOffset) || byteOffset < 0 || byteOffset >= arg0.byteLength) {
          throw new RangeError(`'byteOffset' is out of range [0, ${arg0.byteLength}).`);
        }
        byteLength = arg0.byteLength - byteOffset;
        if (typeof arg2 === "number") {
          byteLength = arg2;
          if (!Number.isSafeInteger(byteLength) || byteLength <= 0 || byteOffset + byteLength > arg0.byteLength) {
            throw new RangeError(`'byteLength' is out of range (0, ${arg0.byteLength - byteOffset}].`);
          }
        }
      }
      model = new Uint8Array(arg0, byteOffset, byteLength).slice();
    } else {
      throw new TypeError("Unexpected argument[0]: must be 'path' or 'buffer'.");
    }
    const r = await call("ortInferenceCreate", { model });
    return new InferenceSession(r.session, r.inputNames, r.outputNames);
  }

  /** run(feeds, fetches?, options?) -> {output name: Tensor}, as onnxruntime-common's InferenceSession.run. */
  async run(feeds, arg1, arg2) {
    if (this._id === null) throw new Error("this InferenceSession was released");
    const fetches = narrow(this.inputNames, this.outputNames, feeds, arg1, arg2);
    const encoded = {};
    for (const [name, t] of Object.entries(feeds)) {
      if (!this.inputNames.includes(name)) throw new Error(`invalid input '${name}'`);
      encoded[name] = encodeTensor(t, `input "${name}"`);
    }
    const results = await call("ortInferenceRun", { session: this._id, feeds: encoded, fetches: Object.keys(fetches) });
    return collect(results, fetches);
  }

  startProfiling() {}

  endProfiling() {}

  async release() {
    if (this._id === null) return;
    await call("ortRelease", { session: this._id });
    this._id = null;
  }
}

export default { TrainingSession, InferenceSession, Tensor, env };
