/* The message protocol between a page and the pytrain worker (worker.js), declared once.
 *
 *   page -> worker   Request  {id, cmd, args}
 *   worker -> page   Reply    {id, ok: true, result} | {id, ok: false, error: ErrorInfo}
 *   worker -> page   Event    {event, data}
 *
 * The worker is a classic script (Pyodide 0.17 loads itself with importScripts, which module
 * workers lack), the page's code is ES modules: this file has no import or export, so it runs as
 * either. The worker loads it with importScripts, js/client.js with `import "./protocol.js"`;
 * both read globalThis.pytrainProtocol.
 */
(function (root) {
  "use strict";

  /**
   * @typedef {"savedRun"|"clearSaved"|"config"|"status"|"useDigits"|"inspectCSV"|"useCSV"|"useArrays"|
   *   "useImages"|"addSamples"|"inspectModel"|"buildDigits"|"buildMLP"|"generate"|"useArtifacts"|
   *   "useText"|"textSamples"|"textLogits"|"exportAdapters"|"exportTransformersJs"|"useArtifactFiles"|"changeOptimizer"|"setScaling"|"buildCNN"|"inspectBackbone"|"examples"|"insights"|
   *   "runFile"|"runOptions"|"train"|"pause"|"resume"|"stop"|"configure"|"evaluate"|"restoreGood"|"predict"|"checkpoint"|
   *   "exportModel"|"digest"|"save"|"resumeSaved"|"federate"|"leaveFederation"|"ortCreate"|"ortTrainStep"|
   *   "ortEvalStep"|"ortOptimizerStep"|"ortLazyResetGrad"|"ortParametersSize"|"ortGetParameters"|
   *   "ortLoadParameters"|"ortRelease"|"ortInferenceCreate"|"ortInferenceRun"|"setDevice"} Command
   * @typedef {"loading"|"ready"|"startup"|"fatal"|"progress"|"epoch"|"saved"|"state"|"done"|"error"|"federation"|"device"} EventName
   * @typedef {{type: string, message: string, expected: boolean}} ErrorInfo
   * @typedef {{id: number, cmd: Command, args: Object}} Request
   * @typedef {{id: number, ok: true, result: *} | {id: number, ok: false, error: ErrorInfo}} Reply
   * @typedef {{event: EventName, data: *}} Event
   */

  /** The commands the page side may send; the worker's command table (worker/commands.js) has exactly these. */
  const COMMANDS = Object.freeze([
    // answered before Python is ready (IndexedDB and the site's config only)
    "savedRun", "clearSaved", "config",
    // data
    "status", "useDigits", "inspectCSV", "useCSV", "useArrays", "useImages", "addSamples",
    // model
    "inspectModel", "buildDigits", "buildMLP", "generate", "useArtifacts", "useArtifactFiles", "changeOptimizer",
    // "Your text": a language or classification model fine-tuned on text, its samples, logits and adapters
    "useText", "textSamples", "textLogits", "exportAdapters", "exportTransformersJs",
    "setScaling", "buildCNN", "inspectBackbone", "examples", "insights", "runFile",
    // training
    "runOptions", "train", "pause", "resume", "stop", "configure", "evaluate", "restoreGood",
    // the model's outputs and the saved run
    "predict", "checkpoint", "exportModel", "digest", "save", "resumeSaved",
    // the device that trains (WebGPU or the CPU)
    "setDevice",
    // "Join a federation" (Flower)
    "federate", "leaveFederation",
    // onnxruntime-web's TrainingSession (pytrain-ort.js)
    "ortCreate", "ortTrainStep", "ortEvalStep", "ortOptimizerStep", "ortLazyResetGrad", "ortParametersSize",
    "ortGetParameters", "ortLoadParameters", "ortRelease",
    // onnxruntime-web's InferenceSession (pytrain-ort.js); ortRelease releases either kind
    "ortInferenceCreate", "ortInferenceRun",
  ]);

  /** onnxruntime-web's commands: each is this operation of pytrain.webapp.ort_session (sessions by id). */
  const ORT_OPS = Object.freeze({
    ortCreate: "create", ortTrainStep: "train_step", ortEvalStep: "eval_step", ortOptimizerStep: "optimizer_step",
    ortLazyResetGrad: "lazy_reset_grad", ortParametersSize: "parameters_size",
    ortGetParameters: "contiguous_parameters", ortLoadParameters: "load_parameters", ortRelease: "release",
    ortInferenceCreate: "inference_create", ortInferenceRun: "inference_run",
  });

  /** The events the worker sends. */
  const EVENTS = Object.freeze(["loading", "ready", "startup", "fatal", "progress", "epoch", "saved", "state", "done",
                                "error", "federation", "device"]);

  /** The events of one training run a host page listens to (the widget re-dispatches these). */
  const RUN_EVENTS = Object.freeze(EVENTS.filter((e) => e !== "startup" && e !== "fatal"));

  root.pytrainProtocol = Object.freeze({ COMMANDS, ORT_OPS, EVENTS, RUN_EVENTS });
})(typeof globalThis !== "undefined" ? globalThis : self);
