// Panel 1's "Your text" tab and what the model says about text (panel 3): an ONNX language or
// classification model with its tokenizer.json and a text file or a CSV of texts and labels, LoRA on by
// default; samples (a greedy continuation, or predictions on held-out texts) after every epoch; the LoRA
// adapters alone as a download. Training, the loss curve and the merged model's download are the page's own.

import { download, readFiles, readText } from "./files.js";
import { $, guarded, hideError, memoryText, nf, refreshButtons, setStatus } from "./ui.js";
import { app, client, on, setData, setModel } from "./store.js";


/** The chosen model (its .onnx and the files uploaded with it, or a Hub folder's files or .zip, by path),
 * tokenizer (null: the one among the model's files) and text; an error names what is missing. */
async function chosen() {
  const files = (await readFiles($("text-model"))).concat(await readFiles($("text-folder")));
  const main = files.find((f) => /\.(onnx|zip)$/i.test(f.name)) || files[0];
  const extraFiles = {};
  for (const f of files) if (f !== main) extraFiles[f.path] = new Uint8Array(f.data);
  const tokenizer = await readText($("text-tokenizer"));
  const data = await readText($("text-data"));
  if (!main) throw new Error("Choose the model's .onnx file (or its Hub folder or .zip).");
  if (!data) throw new Error("Choose a text file (.txt) or a CSV of texts and labels.");
  return { model: { name: main.path, bytes: new Uint8Array(main.data), extraFiles }, tokenizer, data };
}

/** The LoRA setting of a tab: {rank, alpha, targets} or null (every weight trains). */
function loraSetting() {
  if (!$("text-lora").checked) return null;
  const rank = parseInt($("text-lora-rank").value, 10);
  const alpha = parseFloat($("text-lora-alpha").value);
  if (!(rank >= 1)) throw new Error("LoRA rank: give a whole number of at least 1.");
  if (!(alpha > 0)) throw new Error("LoRA alpha: give a positive number.");
  const targets = $("text-lora-targets").value.split(",").map((t) => t.trim()).filter(Boolean);
  return { rank, alpha, targets: targets.length ? targets : null };
}

/** The memory estimate against what the tab has left (the model panel's words, ui.js). */
function showMemory(mem) {
  $("text-memory").textContent = mem ? memoryText(mem) : "";
  // (a step past the heap fits when the GPU trains it: the heap keeps only its parameters and optimizer state)
  const gpu = !!mem && !!mem.gpu && mem.gpu.fits && mem.gpu.heap_fits;
  $("text-memory").classList.toggle("bad", !!mem && !mem.fits && !gpu);
}

$("text-build").onclick = () => guarded($("text-build"), async () => {
  hideError();
  const { model, tokenizer, data } = await chosen();
  const csv = /\.csv$/i.test(data.name);
  const blockSize = parseInt($("text-block").value, 10);
  if (!(blockSize >= 2)) throw new Error("Block size: give at least 2 tokens.");
  const lora = loraSetting();
  setStatus("setup-status", "Reading the text and building the model…");
  showMemory(null);
  app.rebuild = async (optimizer) => {
    const res = await client.call("useText", {
      bytes: model.bytes.slice(), name: model.name, extraFiles: model.extraFiles, tokenizer: tokenizer && tokenizer.text,
      dtype: $("text-dtype").value,
      text: csv ? null : data.text, csv: csv ? data.text : null, blockSize, lora, optimizer });
    setData(res.data);
    setModel(res.model);
    showMemory(res.memory);
    const m = res.model;
    const targets = m.lora ? m.lora.weights : [];
    $("text-info").textContent = `${data.name}: ${(res.notes || []).join("; ")}. ` + (m.lora
      ? `LoRA rank ${m.lora.rank}, alpha ${m.lora.alpha} on ${targets.length} weight${targets.length === 1 ? "" : "s"}: ${targets.join(", ")}.`
      : "Every weight trains (no LoRA).") + (m.loss === "CausalLMLoss" ? " Loss: next-token cross-entropy." : " Loss: cross-entropy.");
    $("text-prompt").value = "";
    $("text-samples").textContent = "";
  };
  await app.rebuild($("optimizer").value);
});

/** Ask the model (current weights) and show what it says. */
async function showSamples() {
  if (!isText()) return null;
  const prompt = $("text-prompt").value.trim() || null;
  const r = await client.call("textSamples", { prompt, newTokens: 20 });
  const box = $("text-samples");
  box.textContent = "";
  const head = document.createElement("p");
  head.textContent = `At step ${nf.format(r.step)}:`;
  box.appendChild(head);
  if (r.kind === "lm") {
    const p = document.createElement("p");
    const b = document.createElement("strong");
    b.textContent = r.prompt;
    p.append(b, document.createTextNode(r.continuation));
    p.className = "sample";
    box.appendChild(p);
  } else {
    const ul = document.createElement("ul");
    for (const row of r.predictions) {
      const li = document.createElement("li");
      li.className = "sample";
      li.textContent = `“${row.text}”: ${row.predicted} (${(100 * row.probability).toFixed(0)}%; labelled ${row.label})`;
      ul.appendChild(li);
    }
    box.appendChild(ul);
  }
  app.textSamples = (app.textSamples || []).concat([r]);
  return r;
}

function isText() {
  return !!(app.model && app.model.ready && app.model.origin === "text" && app.data && app.data.loaded);
}

$("text-sample").onclick = () => guarded($("text-sample"), showSamples);
client.on("epoch", () => { showSamples().catch((e) => console.warn("samples:", e.message || e)); });
client.on("done", () => { if (app.step) showSamples().catch((e) => console.warn("samples:", e.message || e)); });
on("model", (m) => {
  app.textSamples = [];
  if (!(m && m.origin === "text")) showMemory(null);
  $("download-adapters").title = m && m.lora ? `the ${m.lora.weights.length} LoRA adapters alone, as an ONNX file of initializers`
    : "this model has no LoRA adapters";
});

$("download-adapters").onclick = () => guarded($("download-adapters"), async () => {
  download(await client.call("exportAdapters", { format: "onnx" }), `pytrain-adapters-step${app.step}.onnx`);
});
// the folder transformers.js loads, as a zip (pytrain.run.hub_export): config.json, tokenizer files, onnx/model.onnx
// and, when the upload was quantized, onnx/model_quantized.onnx requantized in its scheme
$("download-transformers-js").onclick = () => guarded($("download-transformers-js"), async () => {
  download(await client.call("exportTransformersJs"), `pytrain-transformers-js-step${app.step}.zip`, "application/zip");
});
for (const id of ["text-model", "text-folder", "text-tokenizer", "text-data"]) $(id).onchange = refreshButtons;
