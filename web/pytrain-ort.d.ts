// Types of pytrain-ort.js: onnxruntime-web 1.19's training API (onnxruntime-common 1.19's TrainingSession,
// TrainingSessionCreateOptions, InferenceSession, Tensor, OnnxValue, env), self-contained: a TypeScript
// page that used `import * as ort from "onnxruntime-web/training"` type-checks with
// `import * as ort from "./pytrain-ort.js"`, and each value is assignable to onnxruntime-common's type
// of the same name (tests/web/test_ort_types.py checks both with tsc --strict). The declarations follow
// onnxruntime-common 1.19.2's (MIT License, Copyright (c) Microsoft Corporation). Where pytrain differs:
// CPU tensors only (texture / gpuBuffer throw, fromTexture / fromGpuBuffer refuse), session and run
// options are accepted and ignored, and Tensor.fromImage also takes a canvas.

export declare namespace Tensor {
  interface DataTypeMap {
    float32: Float32Array;
    uint8: Uint8Array;
    int8: Int8Array;
    uint16: Uint16Array;
    int16: Int16Array;
    int32: Int32Array;
    int64: BigInt64Array;
    string: string[];
    bool: Uint8Array;
    float16: Uint16Array;
    float64: Float64Array;
    uint32: Uint32Array;
    uint64: BigUint64Array;
  }
  interface ElementTypeMap {
    float32: number;
    uint8: number;
    int8: number;
    uint16: number;
    int16: number;
    int32: number;
    int64: bigint;
    string: string;
    bool: boolean;
    float16: number;
    float64: number;
    uint32: number;
    uint64: bigint;
  }
  type Type = keyof DataTypeMap;
  type DataType = DataTypeMap[Type];
  type ElementType = ElementTypeMap[Type];
  type CpuPinnedDataTypes = Exclude<Tensor.Type, "string">;
  type TextureType = WebGLTexture;
  type TextureDataTypes = "float32";
  type GpuBufferType = { size: number; mapState: "unmapped" | "pending" | "mapped" };
  type GpuBufferDataTypes = "float32" | "float16" | "int32" | "int64" | "uint32" | "uint8" | "bool";
  type DataLocation = "none" | "cpu" | "cpu-pinned" | "texture" | "gpu-buffer";
}

export type ImageFormat = "RGB" | "RGBA" | "BGR" | "RBG";
export type ImageTensorLayout = "NHWC" | "NCHW";
export interface OptionsFormat { format?: ImageFormat }
export interface OptionsTensorFormat { tensorFormat?: ImageFormat }
export interface OptionsTensorDataType { dataType?: "float32" | "uint8" }
export interface OptionsTensorLayout { tensorLayout?: ImageTensorLayout }
export interface OptionsDimensions { height?: number; width?: number }
export interface OptionResizedDimensions { resizedHeight?: number; resizedWidth?: number }
export interface OptionsNormalizationParameters {
  norm?: {
    bias?: number | [number, number, number] | [number, number, number, number];
    mean?: number | [number, number, number] | [number, number, number, number];
  };
}
export interface TensorFromImageDataOptions extends OptionResizedDimensions, OptionsTensorFormat, OptionsTensorLayout,
  OptionsTensorDataType, OptionsNormalizationParameters {}
export interface TensorFromImageElementOptions extends OptionResizedDimensions, OptionsTensorFormat, OptionsTensorLayout,
  OptionsTensorDataType, OptionsNormalizationParameters {}
export interface TensorFromUrlOptions extends OptionsDimensions, OptionResizedDimensions, OptionsTensorFormat,
  OptionsTensorLayout, OptionsTensorDataType, OptionsNormalizationParameters {}
export interface TensorFromImageBitmapOptions extends OptionResizedDimensions, OptionsTensorFormat, OptionsTensorLayout,
  OptionsTensorDataType, OptionsNormalizationParameters {}
export interface TensorToDataUrlOptions extends OptionsTensorLayout, OptionsFormat, OptionsNormalizationParameters {}
export interface TensorToImageDataOptions extends OptionsTensorLayout, OptionsFormat, OptionsNormalizationParameters {}

interface TypedTensorBase<T extends Tensor.Type> {
  readonly dims: readonly number[];
  readonly type: T;
  readonly data: Tensor.DataTypeMap[T];
  readonly location: Tensor.DataLocation;
  /** Throws: pytrain's tensors are on the CPU. */
  readonly texture: Tensor.TextureType;
  /** Throws: pytrain's tensors are on the CPU. */
  readonly gpuBuffer: Tensor.GpuBufferType;
  readonly size: number;
  getData(releaseData?: boolean): Promise<Tensor.DataTypeMap[T]>;
  dispose(): void;
  toDataURL(options?: TensorToDataUrlOptions): string;
  toImageData(options?: TensorToImageDataOptions): ImageData;
}

export interface TypedTensor<T extends Tensor.Type> extends TypedTensorBase<T> {
  reshape(dims: readonly number[]): TypedTensor<T>;
}

export interface Tensor extends TypedTensorBase<Tensor.Type> {
  reshape(dims: readonly number[]): TypedTensor<Tensor.Type>;
}

export interface TensorFromTextureOptions<T extends Tensor.TextureDataTypes> {
  width: number;
  height: number;
  format?: ImageFormat;
  download?(): Promise<Tensor.DataTypeMap[T]>;
  dispose?(): void;
}

export interface TensorFromGpuBufferOptions<T extends Tensor.GpuBufferDataTypes> {
  readonly dims: readonly number[];
  dataType?: T;
  download?(): Promise<Tensor.DataTypeMap[T]>;
  dispose?(): void;
}

/** What fromImage returns: float32 [1, C, H, W] (onnxruntime-common 1.19 does not read dataType). */
type ImageTensor = Promise<TypedTensor<"float32"> | TypedTensor<"uint8">>;

export interface TensorConstructor {
  new (type: "string", data: Tensor.DataTypeMap["string"] | readonly string[], dims?: readonly number[]): TypedTensor<"string">;
  new (type: "bool", data: Tensor.DataTypeMap["bool"] | readonly boolean[], dims?: readonly number[]): TypedTensor<"bool">;
  new <T extends "uint64" | "int64">(type: T, data: Tensor.DataTypeMap[T] | readonly bigint[] | readonly number[],
                                      dims?: readonly number[]): TypedTensor<T>;
  new <T extends Exclude<Tensor.Type, "string" | "bool" | "uint64" | "int64">>(
    type: T, data: Tensor.DataTypeMap[T] | readonly number[], dims?: readonly number[]): TypedTensor<T>;
  new (data: Float32Array, dims?: readonly number[]): TypedTensor<"float32">;
  new (data: Int8Array, dims?: readonly number[]): TypedTensor<"int8">;
  new (data: Uint8Array, dims?: readonly number[]): TypedTensor<"uint8">;
  new (data: Uint16Array, dims?: readonly number[]): TypedTensor<"uint16">;
  new (data: Int16Array, dims?: readonly number[]): TypedTensor<"int16">;
  new (data: Int32Array, dims?: readonly number[]): TypedTensor<"int32">;
  new (data: BigInt64Array, dims?: readonly number[]): TypedTensor<"int64">;
  new (data: readonly string[], dims?: readonly number[]): TypedTensor<"string">;
  new (data: readonly boolean[], dims?: readonly number[]): TypedTensor<"bool">;
  new (data: Float64Array, dims?: readonly number[]): TypedTensor<"float64">;
  new (data: Uint32Array, dims?: readonly number[]): TypedTensor<"uint32">;
  new (data: BigUint64Array, dims?: readonly number[]): TypedTensor<"uint64">;
  new (type: Tensor.Type, data: Tensor.DataType | readonly number[] | readonly string[] | readonly bigint[] | readonly boolean[],
       dims?: readonly number[]): Tensor;
  new (data: Tensor.DataType, dims?: readonly number[]): Tensor;

  fromImage(imageData: ImageData, options?: TensorFromImageDataOptions): ImageTensor;
  fromImage(imageElement: HTMLImageElement, options?: TensorFromImageElementOptions): ImageTensor;
  fromImage(urlSource: string, options?: TensorFromUrlOptions): ImageTensor;
  fromImage(bitmap: ImageBitmap, options: TensorFromImageBitmapOptions): ImageTensor;
  /** pytrain's addition: a canvas, read as an ImageBitmap is. */
  fromImage(canvas: HTMLCanvasElement | OffscreenCanvas, options?: TensorFromImageBitmapOptions): ImageTensor;
  /** Throws: pytrain has no WebGL tensors. */
  fromTexture<T extends Tensor.TextureDataTypes = "float32">(texture: Tensor.TextureType,
                                                              options: TensorFromTextureOptions<T>): TypedTensor<"float32">;
  /** Throws: pytrain has no WebGPU tensors. */
  fromGpuBuffer<T extends Tensor.GpuBufferDataTypes>(buffer: Tensor.GpuBufferType,
                                                     options: TensorFromGpuBufferOptions<T>): TypedTensor<T>;
  fromPinnedBuffer<T extends Exclude<Tensor.Type, "string">>(type: T, buffer: Tensor.DataTypeMap[T],
                                                              dims?: readonly number[]): TypedTensor<T>;
}

export declare const Tensor: TensorConstructor;

export type OnnxValue = Tensor;
export type OnnxValueDataLocation = Tensor.DataLocation;

export declare namespace InferenceSession {
  type OnnxValueMapType = { readonly [name: string]: OnnxValue };
  type NullableOnnxValueMapType = { readonly [name: string]: OnnxValue | null };
  type FeedsType = OnnxValueMapType;
  type FetchesType = readonly string[] | NullableOnnxValueMapType;
  type ReturnType = OnnxValueMapType;
  type ExecutionProviderConfig = string | { readonly name: string };
  /** Accepted and ignored: pytrain runs on the CPU in its Web Worker. */
  interface SessionOptions {
    executionProviders?: readonly ExecutionProviderConfig[];
    intraOpNumThreads?: number;
    interOpNumThreads?: number;
    freeDimensionOverrides?: { readonly [dimensionName: string]: number };
    graphOptimizationLevel?: "disabled" | "basic" | "extended" | "all";
    enableCpuMemArena?: boolean;
    enableMemPattern?: boolean;
    executionMode?: "sequential" | "parallel";
    optimizedModelFilePath?: string;
    enableProfiling?: boolean;
    profileFilePrefix?: string;
    logId?: string;
    logSeverityLevel?: 0 | 1 | 2 | 3 | 4;
    logVerbosityLevel?: number;
    preferredOutputLocation?: OnnxValueDataLocation | { readonly [outputName: string]: OnnxValueDataLocation };
    enableGraphCapture?: boolean;
    extra?: Record<string, unknown>;
  }
  /** Accepted and ignored. */
  interface RunOptions {
    logSeverityLevel?: 0 | 1 | 2 | 3 | 4;
    logVerbosityLevel?: number;
    terminate?: boolean;
    tag?: string;
    extra?: Record<string, unknown>;
  }
}

export interface InferenceSession {
  run(feeds: InferenceSession.FeedsType, options?: InferenceSession.RunOptions): Promise<InferenceSession.ReturnType>;
  run(feeds: InferenceSession.FeedsType, fetches: InferenceSession.FetchesType,
      options?: InferenceSession.RunOptions): Promise<InferenceSession.ReturnType>;
  release(): Promise<void>;
  startProfiling(): void;
  endProfiling(): void;
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
}

export interface InferenceSessionFactory {
  create(uri: string, options?: InferenceSession.SessionOptions): Promise<InferenceSession>;
  create(buffer: ArrayBufferLike, options?: InferenceSession.SessionOptions): Promise<InferenceSession>;
  create(buffer: ArrayBufferLike, byteOffset: number, byteLength?: number,
         options?: InferenceSession.SessionOptions): Promise<InferenceSession>;
  create(buffer: Uint8Array, options?: InferenceSession.SessionOptions): Promise<InferenceSession>;
}

export declare const InferenceSession: InferenceSessionFactory;

export declare namespace TrainingSession {
  type UriOrBuffer = string | Uint8Array;
}

export interface TrainingSession {
  lazyResetGrad(): Promise<void>;
  runTrainStep(feeds: InferenceSession.FeedsType, options?: InferenceSession.RunOptions): Promise<InferenceSession.ReturnType>;
  runTrainStep(feeds: InferenceSession.FeedsType, fetches: InferenceSession.FetchesType,
               options?: InferenceSession.RunOptions): Promise<InferenceSession.ReturnType>;
  runOptimizerStep(options?: InferenceSession.RunOptions): Promise<void>;
  runEvalStep(feeds: InferenceSession.FeedsType, options?: InferenceSession.RunOptions): Promise<InferenceSession.ReturnType>;
  runEvalStep(feeds: InferenceSession.FeedsType, fetches: InferenceSession.FetchesType,
              options?: InferenceSession.RunOptions): Promise<InferenceSession.ReturnType>;
  getParametersSize(trainableOnly: boolean): Promise<number>;
  loadParametersBuffer(buffer: Uint8Array, trainableOnly: boolean): Promise<void>;
  getContiguousParameters(trainableOnly: boolean): Promise<OnnxValue>;
  release(): Promise<void>;
  readonly trainingInputNames: readonly string[];
  readonly trainingOutputNames: readonly string[];
  readonly evalInputNames: readonly string[];
  readonly evalOutputNames: readonly string[];
}

export interface TrainingSessionCreateOptions {
  checkpointState: TrainingSession.UriOrBuffer;
  trainModel: TrainingSession.UriOrBuffer;
  optimizerModel?: TrainingSession.UriOrBuffer;
  evalModel?: TrainingSession.UriOrBuffer;
}

export interface TrainingSessionFactory {
  create(trainingOptions: TrainingSessionCreateOptions,
         sessionOptions?: InferenceSession.SessionOptions): Promise<TrainingSession>;
}

export declare const TrainingSession: TrainingSessionFactory;

/** Accepted for compatibility (pages set ort.env.wasm.*); pytrain's worker ignores these settings. */
export interface Env {
  wasm: { numThreads?: number; simd?: boolean; proxy?: boolean; wasmPaths?: string | Record<string, string>;
          initTimeout?: number; trace?: boolean };
  webgpu: Record<string, unknown>;
  logLevel?: "verbose" | "info" | "warning" | "error" | "fatal";
  debug?: boolean;
  trace?: boolean;
  readonly versions: { readonly common: string; readonly web?: string };
}

export declare const env: Env;

declare const ort: { TrainingSession: TrainingSessionFactory; InferenceSession: InferenceSessionFactory;
                     Tensor: TensorConstructor; env: Env };
export default ort;
