// Panel 5, Join a federation: this tab's model and data as a node of a Flower federation.
// The worker runs the node (pytrain.flower, driven step by step: web/worker.js "federate"); the page
// shows the rounds: local training, what was sent (parameter names and sizes only) and the global
// model's metrics on this tab's data (from the evaluate messages). A reload rejoins as the same node.

import { $, announce, guarded, nf, setStatus, showError } from "./ui.js";
import { app, client } from "./store.js";

const REJOIN = "pytrain-federation";   // sessionStorage: {url, heartbeat, settings} while this tab is in one

// served: whether the site serves a SuperLink (null until asked); ready: Python is
const fed = { joined: false, nodeId: null, rounds: new Map(), sent: [], events: [], active: false, served: null, ready: false };
app.federation = fed;

function fmt(v) { return typeof v === "number" ? (Number.isInteger(v) ? nf.format(v) : v.toPrecision(4)) : String(v); }
function bytes(n) { return n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${(n / 1024).toFixed(1)} kB` : `${n} B`; }
function metricsText(m) {
  return Object.entries(m || {}).filter(([k]) => k !== "num-examples").map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
}

function row(round) {
  const key = round === null || round === undefined ? "?" : String(round);
  if (!fed.rounds.has(key)) {
    const tr = document.createElement("tr");
    tr.dataset.round = key;
    for (let i = 0; i < 4; i++) tr.appendChild(document.createElement(i ? "td" : "th"));
    tr.firstChild.scope = "row";
    tr.firstChild.textContent = key;
    $("fl-rounds").tBodies[0].prepend(tr);
    fed.rounds.set(key, tr);
  }
  return fed.rounds.get(key);
}

function renderSent(sent) {
  const t = $("fl-sent");
  t.innerHTML = "";
  const head = t.insertRow();
  for (const h of ["Parameter", "Shape", "Size"]) { const th = document.createElement("th"); th.scope = "col"; th.textContent = h; head.appendChild(th); }
  for (const p of sent) {
    const r = t.insertRow();
    r.insertCell().textContent = p.name;
    r.insertCell().textContent = `[${p.shape.join(", ")}]`;
    r.insertCell().textContent = bytes(p.bytes);
  }
}

const PRIVACY_INPUTS = ["fl-dp", "fl-dp-clip", "fl-dp-epsilon", "fl-dp-delta", "fl-require-clipping"];

function setJoined(active) {
  fed.active = active;
  // enabled once Python is ready, and only where this site serves a SuperLink (fl-why says why not)
  $("fl-join").disabled = active || !fed.ready || fed.served !== true;
  $("fl-leave").disabled = !active;
  $("fl-url").disabled = active;
  $("fl-heartbeat").disabled = active;
  for (const id of PRIVACY_INPUTS) $(id).disabled = active;
}

function serverUrl() { return $("fl-url").value.trim() || "flower/"; }

/** Why Join cannot work here, in words for people (also what a failed join says for a 404). */
function noServer(url) {
  return `This site serves no federation: no Flower SuperLink answers at ${url}. To start one, run a SuperLink ` +
    "(flower-superlink) and serve the site with python build.py serve --flower URL, URL being the SuperLink's " +
    "Fleet API (e.g. http://127.0.0.1:9092).";
}

/** Ask the site whether it serves a SuperLink (build.py serve answers GET flower/ with {superlink}). */
async function probeServer() {
  const url = serverUrl();
  let served = false;
  try {
    const resp = await fetch(url.replace(/\/*$/, "/"), { cache: "no-store" });
    served = resp.ok && (await resp.json()).superlink === true;
  } catch (e) { served = false; }
  if (url !== serverUrl()) return;   // the field changed meanwhile: its own probe decides
  fed.served = served;
  $("fl-why").textContent = served ? "" : noServer(url);
  if (!fed.active) setJoined(false);
}

/** The privacy setting: PytrainTrainer's local_dp and require_clipping. */
function privacy() {
  const localDp = $("fl-dp").checked ? { clippingNorm: Number($("fl-dp-clip").value), epsilon: Number($("fl-dp-epsilon").value),
                                         delta: Number($("fl-dp-delta").value) } : null;
  return { localDp, requireClipping: $("fl-require-clipping").checked };
}

/** Who does secure aggregation's public-key crypto in this tab (pytrain.webapp.federation's secagg_crypto). */
const CRYPTO_NAMES = { webcrypto: "WebCrypto", cryptography: "the cryptography package", pure: "pure Python" };

function privacyText(p) {
  if (!p) return "";
  const parts = [];
  if (p.local_dp) parts.push(`local differential privacy on (update clipped to ${fmt(p.local_dp.clipping_norm)}, noise std ${fmt(p.local_dp.noise_std)})`);
  if (p.require_clipping) parts.push("the server's clipping is required");
  return parts.length ? ` Privacy: ${parts.join("; ")}.` : "";
}

client.on("federation", (ev) => {
  fed.events.push(ev);
  switch (ev.kind) {
    case "started":
      setStatus("fl-status", `Joining ${ev.url} with ${nf.format(ev.samples)} local samples…${privacyText(ev.privacy)}` +
                ` Secure aggregation's cryptography: ${CRYPTO_NAMES[ev.secagg_crypto] || ev.secagg_crypto}.`);
      break;
    case "joined":
      fed.joined = true; fed.nodeId = ev.node_id;
      setStatus("fl-status", `In the federation as node ${ev.node_id}. Waiting for the server's next round…`, true);
      announce("Joined the federation.");
      break;
    case "received": {
      const tr = row(ev.round);
      if (ev.message_type === "train") {
        tr.cells[1].textContent = `training (${metricsText(ev.config)})…`;
        setStatus("fl-status", `Round ${ev.round}: training on this tab's data…`);
      } else setStatus("fl-status", `Round ${ev.round}: evaluating the global model…`);
      break;
    }
    case "answered": {
      const tr = row(ev.round);
      if (ev.message_type === "train") {
        tr.cells[1].textContent = `${nf.format(ev.metrics["num-examples"])} samples, ${metricsText(ev.metrics)}, ${ev.seconds.toFixed(1)} s`;
        const total = ev.sent.reduce((a, p) => a + p.bytes, 0);
        tr.cells[2].textContent = `${ev.sent.length} parameters, ${bytes(total)}`;
        fed.sent = ev.sent;
        renderSent(ev.sent);
        setStatus("fl-status", `Round ${ev.round}: sent the new parameters (no data).`, true);
      } else {
        tr.cells[3].textContent = metricsText(ev.metrics);
        setStatus("fl-status", `Round ${ev.round}: the global model on this tab's data: ${metricsText(ev.metrics)}.`, true);
        announce(`Round ${ev.round} evaluated.`);
      }
      break;
    }
    case "refused":
      row(ev.round).cells[1].textContent = ev.error;
      setStatus("fl-status", ev.error, false, true);
      break;
    case "left":
      fed.joined = false;
      setStatus("fl-status", "Left the federation.", true);
      break;
    case "done": case "failed":
      fed.joined = false;
      setJoined(false);
      if (ev.kind === "failed") { sessionStorage.removeItem(REJOIN); showError({ message: failure(ev.error) }, $("fl-join")); setStatus("fl-status", "Out of the federation.", false, true); }
      break;
    default:
  }
});

/** Why the federation stopped, in words for people (the SuperLink's own answer kept in brackets). */
function failure(error) {
  // the site's /flower/ answers 404 when it is served without a SuperLink behind it
  if (/register-node: HTTP 404/.test(error)) return `${noServer(serverUrl())} (The federation stopped: ${error})`;
  return `The federation stopped: ${error}`;
}

async function join(url, heartbeat, settings) {
  setJoined(true);
  try {
    await client.call("federate", Object.assign({ url, heartbeat }, settings));
    sessionStorage.setItem(REJOIN, JSON.stringify({ url, heartbeat, settings }));
  } catch (e) { setJoined(false); throw e; }
}

$("fl-join").onclick = () => guarded($("fl-join"), () => join(serverUrl(), Number($("fl-heartbeat").value) || 30, privacy()));
$("fl-url").addEventListener("change", () => { fed.served = null; setJoined(false); probeServer(); });
probeServer();
$("fl-leave").onclick = () => guarded($("fl-leave"), async () => {
  sessionStorage.removeItem(REJOIN);
  setStatus("fl-status", "Leaving…");
  await client.call("leaveFederation");
  setJoined(false);
});

// A reload: rejoin (as the same node) once the model and data are back, e.g. from the saved run.
client.on("ready", () => {
  fed.ready = true;
  setJoined(false);
  let saved = null;
  try { saved = JSON.parse(sessionStorage.getItem(REJOIN) || "null"); } catch (e) { saved = null; }
  if (!saved) return;
  $("fl-url").value = saved.url; $("fl-heartbeat").value = saved.heartbeat;
  const dp = (saved.settings || {}).localDp;
  $("fl-require-clipping").checked = !!(saved.settings || {}).requireClipping;
  $("fl-dp").checked = !!dp;
  if (dp) { $("fl-dp-clip").value = dp.clippingNorm; $("fl-dp-epsilon").value = dp.epsilon; $("fl-dp-delta").value = dp.delta; }
  setStatus("fl-status", "This tab was in a federation before the reload: it rejoins once a model and data are loaded.");
  const timer = setInterval(async () => {
    if (!sessionStorage.getItem(REJOIN) || fed.active) { clearInterval(timer); return; }
    let s;
    try { s = await client.call("status"); } catch (e) { return; }
    if (!(s.model && s.model.ready && s.data && s.data.loaded)) return;
    clearInterval(timer);
    join(saved.url, saved.heartbeat, saved.settings || {}).catch((e) => showError(e, $("fl-join")));
  }, 1000);
});
