// Panel 4, What it learned: the validation confusion matrix and per-class accuracy (or predicted
// against true values for regression), the model's parameters and the learning-rate schedule.

import { $, nf } from "./ui.js";
import { app, client, on } from "./store.js";

function cell(tag, text, attrs = {}) {
  const el = document.createElement(tag);
  el.textContent = text;
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

function renderConfusion(r) {
  const table = $("confusion");
  table.innerHTML = "";
  table.appendChild(cell("caption", "Validation confusion matrix"));
  const head = document.createElement("tr");
  head.appendChild(cell("th", "true↓ said→", { scope: "col" }));
  r.classes.forEach((c) => head.appendChild(cell("th", c, { scope: "col" })));
  head.appendChild(cell("th", "right", { scope: "col", title: "accuracy on this class" }));
  const thead = document.createElement("thead");
  thead.appendChild(head);
  table.appendChild(thead);
  const body = document.createElement("tbody");
  r.confusion.forEach((row, i) => {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", r.classes[i], { scope: "row" }));
    row.forEach((n, j) => {
      const td = cell("td", nf.format(n));
      const share = r.support[i] ? n / r.support[i] : 0;
      // shade by the share of the row: the diagonal in green, confusions in red
      td.style.background = n ? (i === j ? `rgba(27,127,59,${0.12 + 0.6 * share})` : `rgba(192,57,43,${0.12 + 0.6 * share})`) : "";
      if (i === j) td.className = "diag";
      tr.appendChild(td);
    });
    const acc = r.per_class[i];
    tr.appendChild(cell("td", acc === null ? "–" : `${Math.round(100 * acc)}%`));
    body.appendChild(tr);
  });
  table.appendChild(body);
  let worst = null;
  r.per_class.forEach((a, i) => { if (a !== null && (worst === null || a < r.per_class[worst])) worst = i; });
  $("learned-summary").textContent = `Validation accuracy ${(100 * r.accuracy).toFixed(1)}% on ${nf.format(r.n)} samples ` +
    `after epoch ${r.epoch}.` + (worst !== null ? ` Hardest class: ${r.classes[worst]} (${(100 * r.per_class[worst]).toFixed(1)}%).` : "");
}

function renderScatter(r) {
  const c = $("scatter");
  const ctx = c.getContext("2d");
  const w = c.width, h = c.height, pad = 36;
  ctx.clearRect(0, 0, w, h);
  const vals = r.pairs.flat();
  let lo = Math.min(...vals), hi = Math.max(...vals);
  if (hi === lo) { lo -= 1; hi += 1; }
  const X = (v) => pad + ((v - lo) / (hi - lo)) * (w - 2 * pad);
  const Y = (v) => h - pad - ((v - lo) / (hi - lo)) * (h - 2 * pad);
  ctx.strokeStyle = "#6b7280"; ctx.strokeRect(pad, pad, w - 2 * pad, h - 2 * pad);
  ctx.setLineDash([4, 4]); ctx.beginPath(); ctx.moveTo(X(lo), Y(lo)); ctx.lineTo(X(hi), Y(hi)); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = "rgba(31,78,140,0.6)";
  for (const [t, p] of r.pairs) { ctx.beginPath(); ctx.arc(X(t), Y(p), 2.5, 0, 2 * Math.PI); ctx.fill(); }
  ctx.fillStyle = "#374151"; ctx.font = "12px system-ui, sans-serif";
  ctx.fillText("true →", w - pad - 40, h - 10);
  ctx.fillText("predicted ↑", 4, pad - 10);
  ctx.fillText(String(+lo.toPrecision(3)), pad, h - pad + 14);
  ctx.fillText(String(+hi.toPrecision(3)), w - pad - 30, h - pad + 14);
  const better = r.rmse < r.baseline_rmse;
  const summary = `Validation RMSE ${r.rmse.toPrecision(4)}, MAE ${r.mae.toPrecision(4)} on ${nf.format(r.n)} samples; ` +
    `always predicting the mean would give RMSE ${r.baseline_rmse.toPrecision(4)}` + (better ? "." : ": the model does not beat it yet.");
  $("learned-summary").textContent = summary;
  c.setAttribute("aria-label", `Predicted against true values (dots on the dashed line are exact). ${summary}`);
}

function renderLayers(r) {
  const table = $("layers-table");
  table.innerHTML = "";
  table.appendChild(cell("caption", "The model's parameters"));
  const head = document.createElement("tr");
  for (const t of ["parameter", "shape", "values", "trains"]) head.appendChild(cell("th", t, { scope: "col" }));
  const thead = document.createElement("thead");
  thead.appendChild(head);
  table.appendChild(thead);
  const body = document.createElement("tbody");
  for (const l of r.layers) {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", l.name, { scope: "row" }));
    tr.appendChild(cell("td", l.shape.join(" × ") || l.note || "scalar"));
    tr.appendChild(cell("td", nf.format(l.size)));
    tr.appendChild(cell("td", l.trains ? "yes" : "no (frozen)"));
    body.appendChild(tr);
  }
  table.appendChild(body);
  const trained = r.layers.filter((l) => l.trains).reduce((a, l) => a + l.size, 0);
  $("layers-summary").textContent = `${r.layers.length} parameter tensors, ${nf.format(trained)} values trained` +
    `; ${r.schedule}.`;
}

/** Ask the worker what the model learned and show it (after a run, a resume or a take-back). */
async function refreshLearned() {
  if (!app.model || !app.model.ready || !app.data || !app.data.loaded) return null;
  const r = await client.call("insights");
  app.learned = r;
  $("learned-none").hidden = true;
  $("learned-body").hidden = false;
  const classes = r.task === "classification" && r.confusion;
  $("learned-classes").hidden = !classes;
  $("learned-how").hidden = !classes;
  $("learned-regression").hidden = !(r.task !== "classification" && r.pairs);
  if (classes) renderConfusion(r);
  else if (r.pairs) renderScatter(r);
  renderLayers(r);
  return r;
}

/** A new model or new data: what was shown belongs to the previous one. */
function clearLearned() {
  app.learned = null;
  $("learned-none").hidden = false;
  $("learned-body").hidden = true;
}

on("model", clearLearned);   // a new model or new data: what was shown belongs to the previous one
on("trained", () => refreshLearned().catch((e) => console.warn("what it learned:", e.message || e)));
