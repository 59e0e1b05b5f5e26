// pytrain-ort.js's values and types assigned to onnxruntime-common 1.19's: code typed against onnxruntime-web
// takes pytrain-ort's objects, and onnxruntime-common's option objects go into pytrain-ort's calls.
import * as ortc from "onnxruntime-common";
import * as ort from "./pytrain-ort.js";

const trainingFactory: ortc.TrainingSessionFactory = ort.TrainingSession;
const inferenceFactory: ortc.InferenceSessionFactory = ort.InferenceSession;
const tensorConstructor: ortc.TensorConstructor = ort.Tensor;

async function check(image: ImageData, options: ortc.TrainingSessionCreateOptions,
                     sessionOptions: ortc.InferenceSession.SessionOptions, runOptions: ortc.InferenceSession.RunOptions,
                     feeds: ortc.InferenceSession.FeedsType, fromImageOptions: ortc.TensorFromImageDataOptions) {
  const training: ortc.TrainingSession = await ort.TrainingSession.create(options, sessionOptions);
  const inference: ortc.InferenceSession = await ort.InferenceSession.create("model.onnx", sessionOptions);
  const tensor: ortc.Tensor = new ort.Tensor("float32", new Float32Array(4), [2, 2]);
  const typed: ortc.TypedTensor<"int64"> = new ort.Tensor("int64", [1, 2, 3]);
  const fromImage: ortc.TypedTensor<"float32"> | ortc.TypedTensor<"uint8"> = await ort.Tensor.fromImage(image, fromImageOptions);
  const value: ortc.OnnxValue = await training.getContiguousParameters(true);
  const out: ortc.InferenceSession.ReturnType = await ort.TrainingSession.create(options)
    .then((s) => s.runTrainStep(feeds, runOptions));
  const outputs: ortc.InferenceSession.OnnxValueMapType = await inference.run(feeds, ["output"], runOptions);
  const back: ort.Tensor = new ortc.Tensor("float32", new Float32Array(4), [4]);   // and onnxruntime-common's in
  const createOptions: ort.TrainingSessionCreateOptions = options;
  return [trainingFactory, inferenceFactory, tensorConstructor, tensor, typed, fromImage, value, out, outputs, back,
          createOptions];
}

export { check };
