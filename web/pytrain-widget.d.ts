// Types of pytrain-widget.js: createTrainer / Trainer and the <pytrain-trainer> element (docs/web.md, "The
// widget"). tests/web/test_ort_types.py checks a page's use of them with tsc --strict.

/** Bytes the widget fetches or takes as they are: a URL, an ArrayBuffer, a typed array or a File / Blob. */
export type Source = string | URL | ArrayBuffer | ArrayBufferView | Blob;

export type Task = "classification" | "regression";
export type OptimizerName = "AdamW" | "Adam" | "SGD";

export type TrainerData =
  | "digits"
  | { digits: { nTrain?: number } }
  | { csv: Source; label: string; task?: Task }
  | { x: Float32Array | ArrayLike<number>; shape: number[]; y: ArrayLike<number>; task?: Task; classes?: string[] }
  /** "Your text": a text file a causal LM (`model`) learns to continue, in blocks of `blockSize` tokens (default 64;
   * a model of a fixed length uses its own); the last partial block is left out. `model` may be a Hub folder's .zip
   * (config.json, tokenizer files, onnx/model*.onnx): `dtype` picks its model (default "auto": the one transformers.js
   * loads in a browser) and its tokenizer.json is used when `tokenizer` is not given. */
  | { text: Source; tokenizer?: Source; blockSize?: number; config?: Source; dtype?: "auto" | "fp32" | "q8" | "q4" }
  /** "Your text": a CSV of texts and labels (default: the first column and the last) for a classifier (`model`).
   * `config`: a Hugging Face model's config.json (read for the heads and head size of a with-past model's empty past
   * when its input shapes leave them open; docs/text.md). */
  | { textCsv: Source; tokenizer?: Source; textColumn?: string; labelColumn?: string; blockSize?: number;
      config?: Source; dtype?: "auto" | "fp32" | "q8" | "q4" };

/** LoRA adapters (peft's y = x W + alpha/rank * x A^T B^T) beside the weights `targets` names (globs over node or
 * weight names; default: the attention's MatMul/Gemm weights). */
export interface LoRAOptions {
  rank: number;
  alpha?: number;
  targets?: string[];
  dropout?: number;
}

export interface TextSamples {
  kind: "lm" | "classification";
  step: number;
  /** a causal LM: the prompt and its continuation (ids: the new tokens) */
  prompt?: string;
  continuation?: string;
  ids?: number[];
  /** a classifier: held-out texts, their labels and what the model says */
  predictions?: { text: string; label: string; predicted: string; probability: number }[];
}

export interface ArtifactSources {
  training: Source;
  eval: Source;
  optimizer: Source;
  checkpoint: Source;
}

export interface TrainerOptions {
  /** "digits", a CSV table {csv, label, task?} or arrays {x, shape, y}; optional with a run file that holds its table. */
  data?: TrainerData;
  /** "digits-mlp" | "digits-cnn" | a folder URL ending in "/" | the four files. */
  artifacts?: "digits-mlp" | "digits-cnn" | string | ArtifactSources;
  /** An inference .onnx to generate artifacts from (with loss, optimizer, requiresGrad). */
  model?: Source;
  loss?: string;
  requiresGrad?: string[];
  /** LoRA instead of training the weights (`model` and "Your text" data; text data default {rank: 8, alpha: 16},
   * null there trains every weight). */
  lora?: LoRAOptions | null;
  /** A run file (.zip from the page or runFile()) to take back at its step. */
  run?: Source;
  /** Hidden layer sizes of the MLP built for a table (default [32]). */
  hidden?: number[];
  /** The run's total epochs (default 5). */
  epochs?: number;
  /** Default 32. */
  batchSize?: number;
  /** Default 0.005. */
  learningRate?: number;
  /** Default "AdamW". */
  optimizer?: OptimizerName;
  /** The share of a table held out for validation (default 0.2). */
  valFraction?: number;
  /** An element to render a small UI into (status, loss curve, buttons). */
  container?: HTMLElement;
  title?: string;
  autoStart?: boolean;
  /** Save a resumable run in IndexedDB after each epoch (default false). */
  persist?: boolean;
  /** The device that trains: "auto" (default: a hardware WebGPU adapter when the browser has one), true (any
   * adapter, a software one such as SwiftShader too) or false (the CPU). */
  gpu?: "auto" | boolean;
  workerURL?: string | URL;
}

/** A trainer's training options, resolved (Trainer.runOptions()). */
export interface RunOptions {
  epochs: number;
  batchSize: number;
  learningRate: number;
  optimizer: OptimizerName;
  hidden: number[];
  persist: boolean;
  /** The worker trains in slices of about this long between its answers to pause, stop and predict. */
  budgetMs: number;
  /** With persist, a running run is also saved this often within an epoch. */
  saveEveryMs: number;
  seed: number | null;
}

/** What trains: "GPU: <adapter>" or "CPU, N threads", the choice, and why not the GPU ("" when it trains). */
export interface DeviceInfo {
  device: string;
  mode: "auto" | "on" | "off";
  reason: string;
}

export interface ProgressEvent {
  step: number;
  epoch: number;
  epochStep: number;
  stepsPerEpoch: number;
  losses: number[];
  firstStep: number;
  stepsPerSecond: number;
  epochs: number;
}

export interface EpochEvent {
  epoch: number;
  step: number;
  loss: number | null;
  metric: number | null;
  metricName: "accuracy" | "rmse" | "perplexity" | null;
  mae?: number;
}

export interface DoneEvent {
  reason: string;
  epoch: number;
  step: number;
  divergence?: unknown;
}

export interface ErrorEvent {
  type: string;
  message: string;
  expected?: boolean;
}

export interface TrainerEvents {
  loading: { stage: string; fraction: number; loaded: number; total: number };
  ready: Record<string, unknown>;
  status: { message: string };
  progress: ProgressEvent;
  epoch: EpochEvent;
  saved: Record<string, unknown>;
  state: { training: boolean; paused: boolean };
  done: DoneEvent;
  error: ErrorEvent;
  federation: { kind: string; [key: string]: unknown };
  /** What trains changed (a switch, or the GPU given up: the reason says why). */
  device: DeviceInfo;
}

export interface Evaluation {
  loss: number | null;
  metric: number | null;
  metric_name: "accuracy" | "rmse" | "perplexity" | null;
  n: number;
  mae?: number;
  [key: string]: unknown;
}

export declare class Trainer extends EventTarget {
  constructor(options: TrainerOptions);
  readonly options: TrainerOptions;
  /** Resolves once the data and the model are loaded: {data, model} summaries. */
  readonly ready: Promise<{ data: unknown; model: unknown }>;
  /** What trains (null until Python is ready). */
  readonly device: DeviceInfo | null;
  /** Train on the GPU (true), the CPU (false) or "auto" from the next step on, while not training. */
  setGPU(gpu: "auto" | boolean): Promise<DeviceInfo>;
  /** Listen to an event; the handler gets the event data. Returns an unsubscribe function. */
  on<K extends keyof TrainerEvents>(type: K, handler: (detail: TrainerEvents[K]) => void): () => void;
  /** Train up to `epochs` epochs in total; resolves with {reason, epoch, step} when training ends. */
  train(overrides?: Partial<Pick<TrainerOptions, "epochs" | "batchSize" | "learningRate" | "persist">>): Promise<DoneEvent>;
  /** The training options this trainer runs with: those it was given, the rest the defaults (decided in Python). */
  runOptions(): Promise<RunOptions>;
  pause(): Promise<unknown>;
  resume(): Promise<unknown>;
  stop(): Promise<unknown>;
  /** Validation loss and accuracy (classification) or RMSE (regression). */
  evaluate(): Promise<Evaluation>;
  /** Outputs (and class probabilities) for samples x of shape [N, ...]. */
  predict(x: Float32Array | ArrayLike<number>, shape?: number[]): Promise<Record<string, unknown>>;
  /** The trained inference model as ONNX bytes (LoRA adapters merged into their weights). */
  exportModel(): Promise<Uint8Array>;
  /** The LoRA adapters alone: an ONNX file of initializers ("onnx") or an .npz ("npz"). */
  exportAdapters(format?: "onnx" | "npz"): Promise<Uint8Array>;
  /** A text model as the zip of the folder transformers.js loads as it is (config.json, tokenizer files,
   * onnx/model.onnx and, for a quantized model, onnx/model_quantized.onnx requantized in its scheme). */
  exportTransformersJs(): Promise<Uint8Array>;
  /** A text model's samples from its current weights (a continuation, or held-out predictions). */
  samples(options?: { prompt?: string | null; newTokens?: number; topK?: number; seed?: number; count?: number }): Promise<TextSamples>;
  /** A text model's outputs for token ids (batch, length) through the exported model. */
  logits(ids: ArrayLike<number>[], mask?: ArrayLike<number>[] | null): Promise<{ logits: Float32Array; shape: number[] }>;
  /** "Your text": the training memory estimate (bytes, by part) against what the tab's heap has left of
   *  pytrain's limit, set once ready; `{error}` when it could not be made. */
  readonly memory?: { total?: number; parameters?: number; gradients?: number; optimizer_state?: number;
    activations?: number; limit?: number; left?: number; fits?: boolean; describe?: string; batch_size?: number; error?: string };
  /** The current checkpoint (parameters + optimizer state) as bytes. */
  checkpoint(): Promise<Uint8Array>;
  /** The whole run (artifacts, checkpoint, table) as one zip. */
  runFile(): Promise<Uint8Array>;
  /** Join the Flower federation this site serves as a node with this trainer's model and data. */
  federate(options?: { url?: string; heartbeat?: number }): Promise<unknown>;
  leaveFederation(): Promise<unknown>;
  destroy(): void;
}

export declare function createTrainer(options?: TrainerOptions): Trainer;

/** <pytrain-trainer data label task artifacts model loss optimizer epochs batch-size learning-rate hidden-layers
 * heading autostart persist gpu>: dispatches ready, progress, epoch, done, error (and prepared) on itself. */
export declare class PytrainTrainerElement extends HTMLElement {
  trainer: Trainer | null;
  train(overrides?: Parameters<Trainer["train"]>[0]): Promise<DoneEvent>;
  pause(): Promise<unknown>;
  stop(): Promise<unknown>;
  evaluate(): Promise<Evaluation>;
  exportModel(): Promise<Uint8Array>;
}

declare global {
  interface HTMLElementTagNameMap {
    "pytrain-trainer": PytrainTrainerElement;
  }
}
