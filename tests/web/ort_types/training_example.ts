// pytrain-ort.js used exactly as onnxruntime-training-examples' web demo (on_device_training/web/web-bundler,
// src/App.tsx and src/mnist.ts) and onnxruntime-web's docs use onnxruntime-web/training; only the import differs.
import * as ort from "./pytrain-ort.js";   // was: import * as ort from "onnxruntime-web/training";

const lossNodeName = "onnx::loss::8";

function indexOfMax(arr: Float32Array): number {
  let maxIndex = 0;
  for (let i = 1; i < arr.length; i++) if (arr[i] > arr[maxIndex]) maxIndex = i;
  return maxIndex;
}

function getPredictions(results: ort.Tensor): number[] {
  const predictions = [];
  const [batchSize, numClasses] = results.dims;
  for (let i = 0; i < batchSize; ++i) {
    const probabilities = results.data.slice(i * numClasses, (i + 1) * numClasses) as Float32Array;
    predictions.push(indexOfMax(probabilities));
  }
  return predictions;
}

function countCorrectPredictions(output: ort.Tensor, labels: ort.Tensor): number {
  let result = 0;
  const predictions = getPredictions(output);
  for (let i = 0; i < predictions.length; ++i) if (BigInt(predictions[i]) === labels.data[i]) ++result;
  return result;
}

async function loadTrainingSession(): Promise<ort.TrainingSession> {
  const createOptions: ort.TrainingSessionCreateOptions = {
    checkpointState: "checkpoint",
    trainModel: "training_model.onnx",
    evalModel: "eval_model.onnx",
    optimizerModel: "optimizer_model.onnx",
  };
  return ort.TrainingSession.create(createOptions);
}

function toTensors(buffer: ArrayBuffer, batchSize: number): { data: ort.Tensor; labels: ort.Tensor } {
  const pixels = new Float32Array(buffer, 0, batchSize * 784);
  const labels = new BigInt64Array(batchSize);
  return { data: new ort.Tensor("float32", pixels, [batchSize, 784]), labels: new ort.Tensor("int64", labels, [batchSize]) };
}

async function trainAndTest(buffer: ArrayBuffer): Promise<number> {
  ort.env.wasm.numThreads = 1;
  const session = await loadTrainingSession();
  const batch = toTensors(buffer, 64);
  const feeds = { input: batch.data, labels: batch.labels };
  const results = await session.runTrainStep(feeds);
  const loss = parseFloat(String(results[lossNodeName].data));
  await session.runOptimizerStep();
  await session.lazyResetGrad();
  const evalResults = await session.runEvalStep(feeds);
  const correct = countCorrectPredictions(evalResults["output"], batch.labels);
  const fetched = await session.runTrainStep(feeds, [session.trainingOutputNames[0]]);
  const names: readonly string[] = [...session.trainingInputNames, ...session.evalOutputNames];
  // federated learning's hooks
  const size: number = await session.getParametersSize(true);
  const params = await session.getContiguousParameters(true);
  await session.loadParametersBuffer(new Uint8Array((params.data as Float32Array).buffer), true);
  await session.release();
  return loss + correct + size + names.length + fetched[lossNodeName].size;
}

// onnxruntime-web's inference on the exported model, with an image tensor
async function classify(image: HTMLImageElement, bytes: Uint8Array): Promise<number> {
  const session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const byUrl = await ort.InferenceSession.create("model.onnx");
  const input = await ort.Tensor.fromImage(image, { resizedWidth: 28, resizedHeight: 28, norm: { mean: 255, bias: 0 } });
  const output = await session.run({ [session.inputNames[0]]: input });
  const logits = output[session.outputNames[0]].data as Float32Array;
  const pixels: ImageData = input.toImageData();
  await byUrl.release();
  return indexOfMax(logits) + pixels.width;
}

export { trainAndTest, classify };
