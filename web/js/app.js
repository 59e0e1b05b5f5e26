// The pytrain page: loading, tabs and resuming a saved run. All Python runs in the worker (../worker.js).
// One module per panel: setup.js (1 · Data and model), examples.js (its "By example" tab), train.js
// (2 · Train), text.js (its "Your text" tab, and samples in 3), try.js (3 · Try the model), learned.js (4 · What it learned), federation.js (5 · Join a
// federation). No panel imports another: they share the store (store.js: the state, and events they
// subscribe to) and ui.js (status lines, errors, focus). The imports below only load the panels,
// in the order their handlers of the same events run.

import { $, announce, describeSetup, guarded, nf, refreshButtons, setStatus, showError } from "./ui.js";
import { app, client, emit, setModel } from "./store.js";
import "./learned.js";
import "./examples.js";
import "./setup.js";
import "./text.js";
import "./try.js";
import "./train.js";
import "./federation.js";

// ------------------------------------------------------------------ loading

client.on("loading", ({ stage, fraction }) => {
  $("load-bar").style.width = `${Math.round(fraction * 100)}%`;
  $("load-progress").setAttribute("aria-valuenow", String(Math.round(fraction * 100)));
  $("load-text").textContent = `${stage}… ${Math.round(fraction * 100)}%`;
});
client.on("startup", (marks) => { app.timing.startup = marks; });
client.on("ready", (v) => {
  app.timing.ready = performance.now();
  app.ready = true;
  app.versions = v;
  $("load-bar").style.width = "100%";
  $("loader").classList.add("done");
  $("load-text").textContent = "Python is ready.";
  showVersions(v);
  document.body.dataset.ready = "1";
  setStatus("setup-status", "Choose data and a model.");
  announce("Python is ready.");
  describeSetup();
  refreshButtons();
});
function showVersions(v) {
  $("versions").textContent = `pytrain ${v.pytrain} · Python ${v.python} · numpy ${v.numpy} · Pyodide ${v.pyodide} · products: ${v.gemm}${v.device ? " · trains on " + v.device : ""}`;
}
client.on("device", (d) => { if (app.versions) showVersions(Object.assign({}, app.versions, { device: d.device })); });   // (app.versions: as at start)
client.on("fatal", (e) => { $("load-text").textContent = "Python could not start."; showError(e); });
client.on("error", (e) => showError(e, $("train-status")));

// ------------------------------------------------------------------ tabs

const tabButtons = Array.from(document.querySelectorAll(".tabs button"));
function selectTab(btn, focus = false) {
  for (const b of tabButtons) {
    b.setAttribute("aria-selected", String(b === btn));
    b.tabIndex = b === btn ? 0 : -1;   // one tab stop for the tab list; arrows move inside it
    $(`tab-${b.dataset.tab}`).hidden = b !== btn;
  }
  if (focus) btn.focus();
  app.tab = btn.dataset.tab;
  emit("tab", app.tab);
}
for (const btn of tabButtons) {
  btn.onclick = () => selectTab(btn);
  btn.onkeydown = (e) => {
    const i = tabButtons.indexOf(btn), n = tabButtons.length;
    const to = { ArrowRight: (i + 1) % n, ArrowLeft: (i + n - 1) % n, Home: 0, End: n - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    selectTab(tabButtons[to], true);
  };
}

// ------------------------------------------------------------------ resume a saved run

async function offerResume() {
  const saved = await client.call("savedRun");
  if (!saved) return;
  const m = saved.model || {};
  const src = saved.dataSource || {};
  const what = m.origin === "digits" ? `digits ${String(m.kind).toUpperCase()}` : m.origin === "mlp" ? "table MLP"
    : m.origin === "cnn" ? "by-example CNN" : m.origin === "backbone" ? `by-example head on ${(m.backbone || {}).name || "a backbone"}`
    : m.origin === "text" ? (m.loss === "CausalLMLoss" ? "language model (Your text)" : "text classifier (Your text)")
    : "model";
  const data = src.kind === "csv" ? ` on column "${src.label}"` : "";
  $("resume-text").textContent = `A saved ${what} run${data} is in this browser: epoch ${saved.epoch}, step ` +
    `${nf.format(saved.step)} (saved ${new Date(saved.savedAt).toLocaleString()}; a run is saved after every epoch ` +
    "and every 10 seconds of training, so steps after the save are trained again). Resume it?";
  $("resume-banner").hidden = false;
  $("resume-banner").dataset.step = String(saved.step);
  $("resume-banner").dataset.digest = saved.digest;
  app.savedRun = saved;
}

$("resume-btn").onclick = () => guarded($("resume-btn"), async () => {
  setStatus("setup-status", "Restoring the saved run…");
  const res = await client.call("resumeSaved");
  app.resumed = res;
  app.data = res.data;
  app.rebuild = null;
  setModel(res.model);
  app.step = res.step; app.epoch = res.epoch;   // with the model, before any await: one state, never step 0
  await emit("runBack", res.model);   // a "By example" run: its classes and examples back in the gallery
  emit("history", res.history);
  const t = res.train || {};
  emit("settings", t);
  $("resume-banner").hidden = true;
  setStatus("train-status", `Resumed at epoch ${res.epoch}, step ${nf.format(res.step)}.`);
  refreshButtons();
  if (res.step) emit("trained");
  // It was interrupted mid-run: carry on where it stopped.
  if (t.epochs && res.epoch < t.epochs && app.savedRun && ["epoch", "progress"].includes(app.savedRun.reason)) $("start").click();
});
$("discard-btn").onclick = () => guarded($("discard-btn"), async () => {
  await client.call("clearSaved");
  $("resume-banner").hidden = true;
});

// ------------------------------------------------------------------ start

describeSetup();
refreshButtons();
offerResume().catch((e) => console.warn("no saved run available:", e.message || e));
