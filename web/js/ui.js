// What every panel of the page shows alike: status lines, errors shown where the action was, the
// setup line, the buttons' states and focus that survives buttons disabling themselves. The state
// they read is the store's (store.js).

import { app } from "./store.js";
import { hideError, showError } from "./errors.js";

export { hideError, showError };   // the one error box (errors.js)

export const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ errors and status

/** Run an async UI action; errors show next to `button` (or `near`) and re-enable the button. */
export async function guarded(button, fn, near = null) {
  if (button) button.disabled = true;
  app.busy += 1;
  try { return await fn(); } catch (e) {
    // a half-done step must not leave its progress message behind ("Reading the table…")
    if ($("setup-status").textContent.endsWith("…")) describeSetup();
    showError(e, near || button);
    return undefined;
  } finally {
    app.busy -= 1;
    if (button) button.disabled = false;
    refreshButtons();
  }
}

// Buttons that disable themselves (Build, Start…) would drop the focus to the page body: keep it
// on the next control of the same group, or on the section's status line.
let lastFocus = null;
document.addEventListener("focusin", (e) => { lastFocus = e.target; });
function keepFocus() {
  const active = document.activeElement;
  // Chromium moves the focus off a disabled button only at the next frame: a disabled active element is lost too
  if (active && active !== document.body && !active.disabled) return;
  const lost = active && active !== document.body ? active : lastFocus;
  if (!lost || !lost.isConnected) return;
  if (!lost.disabled && lost.offsetParent !== null) { lost.focus({ preventScroll: true }); return; }   // enabled again
  const usable = (box) => box && Array.from(box.querySelectorAll("button, input, select"))
    .find((el) => !el.disabled && el.offsetParent !== null);
  const card = lost.closest(".card");
  // the next control of its group; else of its card (a finished run: "Train until epoch", which Start asks to raise)
  const target = usable(lost.closest(".row, fieldset, .tab, .card")) || usable(card) || (card && card.querySelector(".status"));
  if (target) target.focus({ preventScroll: true });
}

export function setStatus(id, text, ok = false, bad = false) {
  $(id).textContent = text;
  $(id).classList.toggle("ok", ok);
  $(id).classList.toggle("bad", bad);
  if (id === "train-status") announce(text);   // training milestones; per-step progress goes through showProgress
}

/** Say a milestone to screen readers (the one polite live region of the page besides the setup line). */
export function announce(text) {
  $("announce").textContent = text;
  app.announced.push(text);
}

export const nf = new Intl.NumberFormat();

/**
 * Why the data cannot go into the model ("" when it can, or when either is missing): samples of
 * another shape than the model's input (a model generated or built after the data was loaded).
 * Open dimensions of the model (null) take any size; a flat model takes samples of as many values.
 */
export function mismatch() {
  const d = app.data, m = app.model;
  if (!(d && d.loaded && m && m.ready && d.sample_shape && m.sample_shape)) return "";
  const ds = d.sample_shape, ms = m.sample_shape;
  const size = (s) => s.reduce((a, b) => a * b, 1);
  const fits = ms.every((s) => Number.isInteger(s)) ? size(ms) === size(ds)
    : ms.length === ds.length && ms.every((s, i) => s == null || s === ds[i]);
  if (fits) return "";
  const shown = (s) => s.length === 1 ? `${s[0] == null ? "any number of" : nf.format(s[0])} values`
    : s.map((v) => (v == null ? "any" : v)).join("×");
  return `The model takes ${shown(ms)} inputs but the data's samples are ${shown(ds)}: load data for this model ` +
    `("Your model" → Training data resizes pictures to its input) or build a model for this data.`;
}

export function describeSetup() {
  const parts = [];
  const d = app.data;
  if (d && d.loaded) {
    const what = d.kind === "digits" ? "digits" : d.kind === "csv" || d.kind === "text_csv" ? "rows"
      : d.kind === "text" ? `blocks of ${d.sample_shape[0]} tokens` : "samples";
    parts.push(`Data: ${nf.format(d.train)} training / ${nf.format(d.val)} validation ${what}` +
      (d.task === "classification" ? `, ${d.num_classes} classes` : d.task === "lm" ? ", next-token prediction" : ", regression") +
      (d.added ? ` (${d.added} added by you)` : "") + ".");
    if (d.notes && d.notes.length) parts.push(`Table: ${d.notes.join("; ")}.`);
    if (d.task_reason) parts.push(`Task: ${d.task}, because ${d.task_reason} (set "Task" to change it).`);
  } else parts.push("No data yet.");
  const m = app.model;
  if (m && m.ready) {
    const name = m.origin === "digits" ? `digits ${m.kind.toUpperCase()}` : m.origin === "mlp" ? `MLP (${m.hidden.join("-")})`
      : m.origin === "upload" ? "your model" : m.origin === "cnn" ? "a small CNN from scratch"
      : m.origin === "backbone" ? `a new head on the frozen backbone ${m.backbone.name}`
      : m.origin === "text" ? (m.loss === "CausalLMLoss" ? "your language model" : "your text classifier") : "your artifacts";
    const sc = m.scaling || {};
    const scaled = [sc.x_mean ? "features standardised" : "", sc.y_mean ? "targets scaled to mean 0, std 1" : ""].filter(Boolean);
    parts.push(`Model: ${name}, ${nf.format(m.params)} trainable parameters` +
      (m.lora ? ` (LoRA rank ${m.lora.rank} on ${m.lora.weights.length} weights)` : "") + `, ${m.loss}, ${m.optimizer}` +
      (scaled.length ? ` (${scaled.join(", ")}; undone in the exported model).` : "."));
    if (m.memory) parts.push(memoryText(m.memory));
    if (m.origin === "backbone") {   // what trains and what does not, in numbers
      const b = m.backbone;
      parts.push(`Backbone: ${nf.format(b.params)} parameters, frozen (BatchNorm on its running statistics, ` +
        `Dropout off); it sees ${b.shape.join("×")} pictures as ${b.normalization} and gives ${nf.format(b.features)} ` +
        `features${b.pooled ? " (its feature map averaged)" : ""}, computed once per example. Head (Gemm): ` +
        `${nf.format(m.head_params)} parameters, trained.`);
      if (m.warning) parts.push(m.warning);   // features that barely vary: the head would train at chance
    }
  } else parts.push("No model yet.");
  const why = mismatch();
  if (why) parts.push(why);
  const warned = !!(m && m.ready && m.warning);
  setStatus("setup-status", parts.join(" "), !!(d && d.loaded && m && m.ready) && !why && !warned, !!why || warned);
}

export const mib = (bytes) => `${nf.format(Math.round(bytes / 1048576))} MiB`;

/** The model's memory estimate (pytrain/webapp/memory.py) against what the tab has left. */
export function memoryText(mem) {
  if (mem.error) return `Memory: not estimated (${mem.error}).`;
  const over = mem.total > mem.left;
  return `Memory: training needs about ${mib(mem.total)} at batch size ${nf.format(mem.batch_size)} (parameters ` +
    `${mib(mem.parameters)}, gradients ${mib(mem.gradients)}, optimizer state ${mib(mem.optimizer_state)}, activations ` +
    `${mib(mem.activations)}), ${over ? "over" : "within"} the ${mib(mem.left)} left of the ${mib(mem.limit)} limit.` +
    (mem.gpu ? ` On the GPU (${mem.gpu.adapter}): ${mib(mem.gpu.total)} of the ${mib(mem.gpu.memory)} pytrain assumes it has` +
      `${mem.gpu.fits ? "" : ", too much: the CPU trains"}; the wasm heap keeps only ${mib(mem.gpu.heap)} there ` +
      `(${mem.gpu.moments_on_gpu ? "parameters and one optimizer moment at a time: the optimizer state stays on the GPU"
        : "parameters, and optimizer state read back for saving"}), ${mem.gpu.heap_fits ? "within" : "over"} what is left.` : "");
}

/** "Train until epoch" is the run's total: when the run has trained that many, what to type to train on ("" otherwise). */
export function untilHint() {
  const until = parseInt($("epochs").value, 10);
  if (!(until >= 1) || app.epoch < until) return "";
  return `The run has trained ${nf.format(app.epoch)} epoch${app.epoch === 1 ? "" : "s"}: set "Train until epoch" to ` +
    `${nf.format(app.epoch + 1)} or more to train on.`;
}

export function refreshButtons() {
  const ready = app.ready;
  const haveModel = !!(app.model && app.model.ready);
  const haveData = !!(app.data && app.data.loaded);
  $("digits-build").disabled = !ready || app.training;
  $("csv-build").disabled = !ready || app.training || !$("csv-label").value;
  $("onnx-generate").disabled = !ready || app.training || !app.onnxUpload;
  const chosen = (id) => ($(id).files || []).length > 0;
  $("text-build").disabled = !ready || app.training || !((chosen("text-model") || chosen("text-folder")) && chosen("text-data"));
  $("text-sample").disabled = !ready || !haveModel || !haveData || app.model.origin !== "text";
  $("download-adapters").disabled = !ready || !haveModel || !app.model.lora;
  $("download-transformers-js").disabled = !ready || !haveModel || app.model.origin !== "text";
  $("artifacts-use").disabled = !ready || app.training || !($("artifact-files").files || []).length;
  $("data-csv-load").disabled = !ready || app.training || !$("data-csv-label").value;
  $("data-images-load").disabled = !ready || app.training || !(($("data-images").files || []).length || ($("data-folder").files || []).length);
  const why = app.training ? "" : mismatch() || (haveModel && haveData ? untilHint() : "");
  $("start").disabled = !ready || app.training || !haveModel || !haveData || !!why;
  $("start-hint").textContent = why;
  $("start-hint").hidden = !why;
  $("start").textContent = app.step > 0 && !app.training ? "Continue" : "Start";
  $("pause").disabled = !app.training || app.paused;
  $("resume-train").disabled = !app.training || !app.paused;
  $("stop").disabled = !app.training;
  $("optimizer").disabled = app.training;
  $("download-checkpoint").disabled = !ready || !haveModel;
  $("download-run").disabled = !ready || !haveModel || app.training;
  $("download-model").disabled = !ready || !haveModel;
  $("add-sample").disabled = !ready || !haveData || !app.lastPrediction || !app.lastPrediction.input || !(app.data && app.data.kind === "digits");
  $("row-predict").disabled = !ready || !haveModel;
  $("resume-btn").disabled = !ready || app.training;
  keepFocus();
}
