// pytrain-widget.js used as README.md and docs/web.md ("The widget") show it.
import { createTrainer } from "./pytrain-widget.js";

async function run(): Promise<number> {
  const trainer = createTrainer({
    container: document.getElementById("trainer")!,     // optional: a small UI (status, loss curve, buttons)
    data: { csv: "static/datasets/iris.csv", label: "species" },   // or "digits", or {x: Float32Array, shape, y}
    hidden: [16], epochs: 30, batchSize: 16, learningRate: 0.01, optimizer: "AdamW",
  });
  trainer.on("progress", (p) => console.log(p.step, p.losses, p.stepsPerSecond));
  trainer.on("epoch", (e) => console.log(e.epoch, e.metricName, e.metric));
  trainer.on("error", (e) => console.error(e.message));
  const result = await trainer.train();        // resolves on "done": {reason, epoch, step}
  const metrics = await trainer.evaluate();
  const onnxBytes: Uint8Array = await trainer.exportModel();
  await trainer.federate({ url: "flower/", heartbeat: 30 });
  const arrays = createTrainer({ data: { x: new Float32Array(8), shape: [2, 4], y: [0, 1] }, artifacts: "digits-mlp" });
  const resumed = createTrainer({ run: onnxBytes, persist: true });
  // "Your text": a language model with its tokenizer.json, LoRA-fine-tuned on a text file
  const writer = createTrainer({ model: "tiny-gpt2.onnx", data: { text: "corpus.txt", tokenizer: "tokenizer.json", blockSize: 64 },
                                 lora: { rank: 8, alpha: 16 }, epochs: 3, batchSize: 8, learningRate: 0.01 });
  await writer.train();
  const sample = await writer.samples({ prompt: "Once upon a time", newTokens: 20 });
  const { logits, shape } = await writer.logits([[1, 2, 3, 4]]);
  const adapters: Uint8Array = await writer.exportAdapters("onnx");
  console.log(sample.continuation, logits[0], shape, adapters.length, writer.memory?.describe);
  writer.destroy();
  const element = document.querySelector("pytrain-trainer");
  if (element) await element.train({ epochs: 2 });
  arrays.destroy();
  resumed.destroy();
  return result.step + (metrics.metric ?? 0) + onnxBytes.length;
}

export { run };
