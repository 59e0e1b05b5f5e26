/* The command table: one entry per command of js/protocol.js, declared by what it needs instead of
 * written out as a wrapper each. An entry says
 *   early: true     answered before Python is ready (IndexedDB, config, the loop's own state);
 *                   otherwise the command waits for the boot (`ready`)
 *   onFirstPart     runs while the data is the digits' first part (what a run starts with); every
 *                   other command waits for the whole digits and the stdlib's second part first
 *                   (data.js completeFirstPart)
 *   idle: "what"    refused as Busy ("stop training before <what>") while training or federating
 *   gpuSafe: true   reads no parameter: runs while the WebGPU device holds newer ones than the heap (any other
 *                   command reads them back first, training.js gpuToHeap; an idle one lets the GPU's copy go)
 *   newRun: true    starts a new run (empty history, the next save writes everything)
 *   py, args        the Session method it calls and its arguments from the command's
 *                   (args may be async: it runs before the new run starts)
 *   run             or a function doing the command itself
 * and the dispatcher below runs them in that order. */
"use strict";

/** Refuse a command that would change the run under a training loop or a federation. */
function needIdle(what) {
  if (isTraining()) throw new UserError(`stop training before ${what}`, "Busy");
  if (inFederation()) throw new UserError(`leave the federation before ${what}`, "Busy");
}

/* An option the caller leaves unset travels as nothing (encodeArgs drops undefined): its default is the Python
 * method's, spelled once there (a training run's: pytrain.webapp.run_options.TabRun, which runOptions answers).
 * A default kept here decides something on this side (useDigits' slices) or is the page's own choice (useText's
 * LoRA). */
const COMMAND_TABLE = {
  savedRun: { early: true, run: async () => summarizeMeta((await dbGet(["meta"])).meta) },
  clearSaved: { early: true, run: async () => { await dbPut({}, true); return true; } },
  config: { early: true, run: async () => runtime.config },

  status: { onFirstPart: true, gpuSafe: true, py: "status" },
  useDigits: { idle: "changing the data", newRun: true, onFirstPart: true, args: ({ nTrain = 8000, nVal = 1000 }) => digitsArgs(nTrain, nVal),
               run: (_, pyArgs) => digitsLoaded(py("use_digits", pyArgs)) },
  inspectCSV: { py: "inspect_csv", args: fields(["text"]) },
  useCSV: { idle: "changing the data", newRun: true, py: "use_csv",
            args: fields(["text", "label", "task", "valFraction", "seed", "exclude", "missing", "onehot"]) },
  useArrays: { idle: "changing the data", newRun: true, py: "use_arrays",
               args: ({ x, shape, y, task, classes, valFraction, seed }) =>
                 ({ x: { $array: x, shape }, y: { $array: y }, task, classes, val_fraction: valFraction, seed }) },
  useImages: { idle: "changing the data", newRun: true, py: "use_arrays", args: imagesArgs },
  addSamples: { py: "add_samples", args: ({ x, shape, y }) => ({ x: { $array: x, shape }, y: Array.from(y) }) },

  inspectModel: { py: "inspect_model", args: fields(["bytes", "name", "extraFiles"], { bytes: "blob" }) },
  buildDigits: { idle: "changing the model", newRun: true, onFirstPart: true, py: "build_digits",
                 args: async ({ kind = "mlp", optimizer }) => {
                   optimizer = optimizer || py("run_options").optimizer;
                   // the site's prebuilt digits artifacts are AdamW's (buildsite); another optimizer is generated
                   return { kind, optimizer, prebuilt: optimizer === "AdamW" ? await prebuiltArtifacts(kind) : null };
                 } },
  buildMLP: { idle: "changing the model", newRun: true, py: "build_mlp",
              args: fields(["hidden", "activation", "optimizer", "standardize", "seed"]) },
  generate: { idle: "changing the model", newRun: true, py: "generate",
              args: fields(["bytes", "loss", "optimizer", "requiresGrad", "trainableOps", "output", "name", "batchnorm",
                            "extraFiles", "lora"], { bytes: "blob" }) },
  /* "Your text": an ONNX language or classification model, its tokenizer.json and a text file (a causal LM) or a
   * CSV of texts and labels, LoRA on by default ({rank, alpha, targets}; null or rank 0: every weight trains) */
  useText: { idle: "changing the model", newRun: true, py: "text",
             /* unset options take text_source.TextUse's defaults; LoRA on is the page's choice (Python's use() trains
              * every weight when given none) */
             args: ({ bytes, tokenizer, text, csv, blockSize, lora = { rank: 8, alpha: 16 }, optimizer,
                      textColumn, labelColumn, valFraction, name, extraFiles, dtype }) =>
               ({ op: "use", model: bytes, tokenizer, text, csv, block_size: blockSize, lora, optimizer, text_column: textColumn,
                  label_column: labelColumn, val_fraction: valFraction, name, extra_files: extraFiles, dtype }) },
  /* a causal LM's continuation of `prompt` (greedy, or top-k with a seed) or a classifier's held-out predictions */
  textSamples: { py: "text", args: (a) => Object.assign({ op: "samples" }, fields(["prompt", "newTokens", "topK", "seed", "count"])(a)) },
  /* the tab's outputs for token ids (arrays of ids; mask: a classifier's attention mask) through the exported model */
  textLogits: { py: "text", args: ({ ids, mask }) => ({ op: "logits", ids, mask }) },
  exportAdapters: { py: "text", args: ({ format }) => ({ op: "adapters", format }) },
  /* the folder transformers.js loads (config.json, tokenizer files, onnx/model.onnx[, onnx/model_quantized.onnx]) as a zip */
  exportTransformersJs: { py: "text", args: () => ({ op: "transformers_js" }) },
  useArtifacts: { idle: "changing the model", newRun: true, py: "use_artifacts",
                  args: fields(["training", "eval", "optimizer", "checkpoint", "output"]) },
  useArtifactFiles: { idle: "changing the model", newRun: true, run: useArtifactFiles },
  changeOptimizer: { idle: "changing the optimizer", onFirstPart: true, py: "change_optimizer", args: fields(["optimizer"]) },
  setScaling: { py: "set_scaling", args: fields(["features", "targets"]) },
  /* backbone: {bytes, name, extraFiles, size, normalize}, a pretrained feature extractor (only a head trains);
   * with `info`, the bytes are the extractor a restored run came back with, used as they are */
  buildCNN: { idle: "changing the model", newRun: true, py: "build_cnn",
              args: ({ optimizer, backbone = null }) => ({ optimizer, backbone: backbone && {
                bytes: backbone.bytes, name: backbone.name, extra_files: backbone.extraFiles,
                size: backbone.size, normalize: backbone.normalize, info: backbone.info } }) },
  inspectBackbone: { py: "inspect_backbone", args: fields(["bytes", "name", "extraFiles", "size", "normalize"], { bytes: "blob" }) },
  /* The samples of a run on examples, for the "By example" gallery after a resume or a run file. */
  examples: { py: "examples" },
  insights: { py: "insights" },
  runFile: { py: "run_file", args: ({ epochs }) => ({ epochs, history: runHistory() }) },

  /* a training run's options resolved by Python: what the caller set, the rest pytrain.webapp.run_options.TabRun's */
  runOptions: { onFirstPart: true, gpuSafe: true, run: async (args) => camelKeys(py("run_options", snakeKeys(args))) },
  train: { onFirstPart: true, run: startTraining },
  pause: { early: true, run: async () => pauseTraining() },
  resume: { early: true, run: async () => resumeTraining() },
  stop: { early: true, run: async () => resumeTraining(true) },
  configure: { onFirstPart: true, gpuSafe: true, py: "configure", args: ({ batchSize, learningRate }) => {
    configureTraining({ batchSize, learningRate });
    return { batch_size: batchSize, lr: learningRate };
  } },
  evaluate: { py: "evaluate" },
  restoreGood: { idle: "going back", run: async () => {   // back to the last good checkpoint; the plots' history too
    const res = await gpuRestoreGood();   // (py restore_good, or the GPU's streamed good: training.js)
    res.history = trimHistory(res.step);
    return res;
  } },

  /* x: samples (Float32Array) of `shape`; or row: a table's row as typed, one string per column */
  predict: { py: "predict", args: ({ x, shape, row = null }) => (row ? { row: row.map(String) } : { x: { $array: x, shape } }) },
  checkpoint: { run: async () => (await gpuCheckpoint()) || py("checkpoint") },
  exportModel: { py: "export" },
  digest: { py: "digest" },
  save: { run: async () => saveRun("manual") },
  resumeSaved: { idle: "resuming", run: resumeSaved },

  /* the device that trains: gpu "auto" (a hardware WebGPU adapter), "on" (any adapter, SwiftShader too) or "off";
   * {device: "GPU: <adapter>" | "CPU, N threads", mode, reason: why not the GPU} (boot.js installWebGPU) */
  setDevice: { idle: "changing the device", run: async ({ gpu = "auto" }) => {
    if (!["auto", "on", "off"].includes(gpu)) throw new UserError(`gpu is "auto", "on" or "off", not ${gpu}`, "InputError");
    const d = await installWebGPU(runtime.pyodide, gpu);
    emit("device", d);
    return d;
  } },

  federate: { idle: "joining a federation", run: federate },
  leaveFederation: { early: true, run: leaveFederation },
};

/* onnxruntime-web's TrainingSession (pytrain-ort.js): each command is one operation of
 * pytrain.webapp.ort_session on the session id that ortCreate returned. */
for (const [cmd, op] of Object.entries(self.pytrainProtocol.ORT_OPS)) {
  COMMAND_TABLE[cmd] = { py: "ort", args: (args) => Object.assign({ op }, args) };
}

async function imagesArgs({ files, valFraction, seed }) {
  const status = py("status");
  if (!status.model.ready) throw new UserError("build or upload the model first: images are resized to its input shape", "NotReady");
  const shape = imageShapeFor(status.model.sample_shape);
  if (!files || files.length < 2) throw new UserError("choose at least two labelled images", "DataError");
  const { x, labels } = await decodeImages(files, shape);
  const classes = Array.from(new Set(labels)).sort();
  const y = new Int32Array(labels.map((l) => classes.indexOf(l)));
  return { x: { $array: x, shape: [files.length].concat(shape) }, y: { $array: y }, task: "classification", classes,
           val_fraction: valFraction, seed };
}

/* Artifacts or a run file (.zip), recognised by content; {files: [{name, data}]}. A digits run
 * file brings back its digits from the site. */
async function useArtifactFiles({ files }) {
  const byName = {};
  for (const f of files) byName[f.name] = f.data instanceof Uint8Array ? f.data : new Uint8Array(f.data);
  const res = py("use_artifact_files", { files: byName });
  const src = res.data_source || {};
  if (src.kind === "digits") res.data = digitsLoaded(py("use_digits", { blob: await getDigits(), n_train: src.n_train, n_val: src.n_val }));
  res.history = adoptHistory(res.history);   // the run file's plots: later saves and run files carry them on
  return res;
}

async function startTraining(options) {
  if (isTraining()) throw new UserError("training is already running", "Busy");
  needIdle("training on your own");
  // Python resolves the run's options (its defaults: run_options.TabRun) and sets batch size, learning rate and
  // seed; a bad option is this command's error
  const opts = camelKeys(py("start_run", snakeKeys(options)));
  trainLoop(opts);   // reports through events; the reply says it started, with the options it runs with
  return { started: true, options: opts };
}

async function resumeSaved() {
  const stored = await dbGet(["meta", "checkpoint", "artifacts", "data"]);
  if (!stored.meta || !stored.checkpoint || !stored.artifacts) throw new UserError("there is no saved run to resume", "NotFound");
  const meta = stored.meta;
  const digits = meta.data_source && meta.data_source.kind === "digits" ? await getDigits() : null;
  // With a WebGPU device the checkpoint stays here and goes over range by range (training.js gpuReopen): the
  // optimizer state past the wasm heap's budget goes up to the GPU one moment at a time, never whole in the heap
  const streamed = !!runtime.gpu && !!stored.artifacts.checkpoint;
  let res = py("restore", { meta, artifacts: stored.artifacts,
                            checkpoint: streamed ? new Uint8Array(0) : stored.checkpoint,
                            checkpoint_size: streamed ? stored.checkpoint.length : 0,
                            data: stored.data || new Uint8Array(0), digits });
  if (streamed) res = gpuReopen(stored.checkpoint, res);
  res.history = adoptSavedRun(meta, py("status"));
  res.train = meta.train;
  res.savedDigest = meta.digest;
  res.savedStep = meta.step;
  return res;
}

/** One command, as its entry says. */
async function runCommand(spec, args) {
  if (!spec.early) await ready;
  if (!spec.early && !spec.onFirstPart) await completeFirstPart();
  if (spec.idle) needIdle(spec.idle);
  if (!spec.early && !spec.gpuSafe) await gpuToHeap(!!spec.idle);   // (what the GPU trained, for the CPU to read)
  if (spec.run && !spec.newRun) return spec.run(args);
  const pyArgs = spec.args ? await spec.args(args) : undefined;
  if (spec.newRun) startNewRun();
  return spec.run ? spec.run(args, pyArgs) : py(spec.py, pyArgs);
}

self.onmessage = async (e) => {
  const { id, cmd, args } = e.data || {};
  const spec = Object.prototype.hasOwnProperty.call(COMMAND_TABLE, cmd) ? COMMAND_TABLE[cmd] : null;
  if (!spec) { post({ id, ok: false, error: { type: "UnknownCommand", message: `unknown command ${cmd}` } }); return; }
  try {
    const result = await runCommand(spec, args || {});
    const transfer = [];
    collectTransfers(result, transfer);
    post({ id, ok: true, result }, transfer);
  } catch (err) {
    if (!err.expected) console.error(err);
    post({ id, ok: false, error: errorInfo(err) });
  }
};

/* Results' own buffers move to the page instead of being copied (the digits stay here). */
function collectTransfers(value, out) {
  if (value instanceof Uint8Array && value.byteOffset === 0 && value.byteLength === value.buffer.byteLength
      && !isDigitsBuffer(value.buffer)) out.push(value.buffer);
  else if (Array.isArray(value)) value.forEach((v) => collectTransfers(v, out));
  else if (value && typeof value === "object" && !ArrayBuffer.isView(value)) Object.values(value).forEach((v) => collectTransfers(v, out));
}
