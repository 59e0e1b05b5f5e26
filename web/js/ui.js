// What every panel of the page shows alike: status lines, errors shown where the action was, the
// setup line, the buttons' states and focus that survives buttons disabling themselves. The state
// they read is the store's (store.js).

import { app } from "./store.js";

export const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ errors and status

/**
 * Show an error where the action was: the one error box moves next to the control (inside its
 * fieldset, tab or card), scrolls into view and takes the focus. Without a control (e.g. Python
 * failed to load) it stays under the page header.
 */
export function showError(err, near = null) {
  const msg = (err && err.message) || String(err);
  app.errors.push(msg);
  const box = $("error");
  const host = near && near.closest ? near.closest("fieldset, .tab, .card") : null;
  if (host) (near.closest(".draw, .row, label.file") || near).after(box);   // right under the control's row
  else $("notices").prepend(box);
  box.dataset.near = near && near.id ? near.id : "";
  $("error-text").textContent = msg;
  box.hidden = false;
  box.scrollIntoView({ block: "center" });
  box.focus({ preventScroll: true });
}
$("error-close").onclick = () => {
  $("error").hidden = true;
  const back = $($("error").dataset.near || "");
  if (back && !back.disabled) back.focus();
};

/** Run an async UI action; errors show next to `button` (or `near`) and re-enable the button. */
export async function guarded(button, fn, near = null) {
  if (button) button.disabled = true;
  try { return await fn(); } catch (e) {
    // a half-done step must not leave its progress message behind ("Reading the table…")
    if ($("setup-status").textContent.endsWith("…")) describeSetup();
    showError(e, near || button);
    return undefined;
  } finally {
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
  const group = lost.closest(".row, fieldset, .tab, .card");
  const next = group && Array.from(group.querySelectorAll("button, input, select"))
    .find((el) => !el.disabled && el.offsetParent !== null);
  const card = lost.closest(".card");
  const target = next || (card && card.querySelector(".status"));
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

export function describeSetup() {
  const parts = [];
  const d = app.data;
  if (d && d.loaded) {
    const what = d.kind === "digits" ? "digits" : d.kind === "csv" ? "rows" : "samples";
    parts.push(`Data: ${nf.format(d.train)} training / ${nf.format(d.val)} validation ${what}` +
      (d.task === "classification" ? `, ${d.num_classes} classes` : ", regression") +
      (d.added ? ` (${d.added} added by you)` : "") + ".");
    if (d.notes && d.notes.length) parts.push(`Table: ${d.notes.join("; ")}.`);
    if (d.task_reason) parts.push(`Task: ${d.task}, because ${d.task_reason} (set "Task" to change it).`);
  } else parts.push("No data yet.");
  const m = app.model;
  if (m && m.ready) {
    const name = m.origin === "digits" ? `digits ${m.kind.toUpperCase()}` : m.origin === "mlp" ? `MLP (${m.hidden.join("-")})`
      : m.origin === "upload" ? "your model" : m.origin === "cnn" ? "a small CNN from scratch"
      : m.origin === "backbone" ? `a new head on the frozen backbone ${m.backbone.name}` : "your artifacts";
    const sc = m.scaling || {};
    const scaled = [sc.x_mean ? "features standardised" : "", sc.y_mean ? "targets scaled to mean 0, std 1" : ""].filter(Boolean);
    parts.push(`Model: ${name}, ${nf.format(m.params)} trainable parameters, ${m.loss}, ${m.optimizer}` +
      (scaled.length ? ` (${scaled.join(", ")}; undone in the exported model).` : "."));
    if (m.origin === "backbone") {   // what trains and what does not, in numbers
      const b = m.backbone;
      parts.push(`Backbone: ${nf.format(b.params)} parameters, frozen (BatchNorm on its running statistics, ` +
        `Dropout off); it sees ${b.shape.join("×")} pictures as ${b.normalization} and gives ${nf.format(b.features)} ` +
        `features${b.pooled ? " (its feature map averaged)" : ""}, computed once per example. Head (Gemm): ` +
        `${nf.format(m.head_params)} parameters, trained.`);
    }
  } else parts.push("No model yet.");
  setStatus("setup-status", parts.join(" "), !!(d && d.loaded && m && m.ready));
}

export function refreshButtons() {
  const ready = app.ready;
  const haveModel = !!(app.model && app.model.ready);
  const haveData = !!(app.data && app.data.loaded);
  $("digits-build").disabled = !ready || app.training;
  $("csv-build").disabled = !ready || app.training || !$("csv-label").value;
  $("onnx-generate").disabled = !ready || app.training || !app.onnxUpload;
  $("artifacts-use").disabled = !ready || app.training || !($("artifact-files").files || []).length;
  $("data-csv-load").disabled = !ready || app.training || !$("data-csv-label").value;
  $("data-images-load").disabled = !ready || app.training || !(($("data-images").files || []).length || ($("data-folder").files || []).length);
  $("start").disabled = !ready || app.training || !haveModel || !haveData;
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
