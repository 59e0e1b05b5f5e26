/* "Join a federation" (Flower). The node's protocol runs in Python, one step at a time
 * (pytrain/flower/steps.py): this loop performs SecAgg+'s crypto steps (worker/secagg_crypto.js),
 * signs each request (WebCrypto, P-256 ECDSA-SHA256), sends it through the page's own origin
 * (build.py serve --flower proxies /flower/ to the SuperLink) and hands the answer back. The key
 * (non-extractable) and the node id stay in IndexedDB, so a reloaded tab rejoins as the same node. */
"use strict";

let federation = null;      // {stop, wake, done: Promise} while this tab is in a federation
const FL_DB = "pytrain-flower";

function flStore(mode, fn) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(FL_DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore("node");
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction("node", mode);
      const req = fn(tx.objectStore("node"));
      tx.oncomplete = () => { open.result.close(); resolve(req.result); };
      tx.onerror = () => { open.result.close(); reject(tx.error); };
    };
  });
}
const flGet = (key) => flStore("readonly", (s) => s.get(key));
const flPut = (key, value) => flStore("readwrite", (s) => value === null ? s.delete(key) : s.put(value, key));

async function federationKey() {
  let key = null;
  try { key = await flGet("key"); } catch (e) { console.warn("pytrain: no IndexedDB for the node key:", e); }
  if (key && key.privateKey && key.pem) return key;
  const pair = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign", "verify"]);
  const pem = pemText("PUBLIC KEY", new Uint8Array(await crypto.subtle.exportKey("spki", pair.publicKey)));
  key = { privateKey: pair.privateKey, pem };
  try { await flPut("key", key); } catch (e) { /* this tab's node is new on every visit */ }
  return key;
}

/* WebCrypto signs ECDSA as raw r||s; the SuperLink wants DER: SEQUENCE { INTEGER r, INTEGER s }. */
function derSignature(raw) {
  const int = (b) => {
    let i = 0;
    while (i < b.length - 1 && b[i] === 0) i++;
    b = b.slice(i);
    return b[0] & 0x80 ? [0x02, b.length + 1, 0, ...b] : [0x02, b.length, ...b];
  };
  const half = raw.length / 2;
  const body = int(raw.slice(0, half)).concat(int(raw.slice(half)));
  return new Uint8Array([0x30, body.length, ...body]);
}

async function signedHeaders(key) {
  const ts = new Date().toISOString().replace("Z", "+00:00");
  const raw = new Uint8Array(await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, key.privateKey,
                                                     new TextEncoder().encode(ts)));
  return { "Content-Type": "application/protobuf", Accept: "application/protobuf",
           "flwr-public-key": btoa(key.pem), "flwr-timestamp": ts, "flwr-signature": b64(derSignature(raw)) };
}

/* The answer's first `limit` bytes: a hostile answer is not read further (the node refuses it). */
async function readAtMost(resp, limit) {
  if (!resp.body) return new Uint8Array(0);
  const reader = resp.body.getReader();
  const parts = [];
  let size = 0;
  while (size < limit) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    size += value.length;
  }
  if (size >= limit) await reader.cancel().catch(() => {});
  const out = new Uint8Array(Math.min(size, limit));
  let at = 0;
  for (const p of parts) {
    const take = Math.min(p.length, out.length - at);
    out.set(p.subarray(0, take), at);
    at += take;
  }
  return out;
}

async function federationLoop(f, key, url) {
  let answer = {};
  try {
    for (;;) {
      if (f.stop && !f.stopSent) { py("federation", { op: "stop" }); f.stopSent = true; }
      const step = py("federation", Object.assign({ op: "next" }, answer));
      answer = {};
      for (const ev of step.events) {
        if (ev.kind === "joined") await flPut("node:" + url, ev.node_id).catch(() => {});
        if (ev.kind === "left") await flPut("node:" + url, null).catch(() => {});
        // the federated model is this tab's run: kept like an epoch's, so a reload can resume and rejoin
        if (ev.kind === "answered" && ev.message_type === "train") await saveRun("federation").catch(() => {});
        if (ev.kind === "answered" || ev.kind === "refused") ev.wasm_heap = wasmHeapBytes();
        emit("federation", ev);
      }
      if (step.kind === "done" || step.kind === "failed") {
        emit("federation", { kind: step.kind, error: step.error || null, answered: step.answered });
        return;
      }
      if (step.kind === "crypto") {  // SecAgg+'s public-key crypto, with WebCrypto (worker/secagg_crypto.js)
        answer = await cryptoStep(step.op, step.args);
        emit("federation", { kind: "crypto", op: step.op, by: "webcrypto", error: answer.crypto_error || null });
        continue;
      }
      if (step.kind === "sleep") {
        if (step.seconds > 0 && !f.stop) await new Promise((r) => { f.wake = r; setTimeout(r, step.seconds * 1000); });
        else await yieldToEvents();
        continue;
      }
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), step.timeout * 1000);
      try {
        const resp = await fetch(url + "/v1/fleet/" + step.route, { method: "POST", body: step.body, cache: "no-store",
                                                                   headers: await signedHeaders(key), signal: abort.signal });
        answer = { status: resp.status, body: await readAtMost(resp, step.max_bytes + 1) };
      } catch (e) {
        answer = { error: e.name === "AbortError" ? `no answer within ${step.timeout} s` : (e.message || String(e)) };
      } finally { clearTimeout(timer); }
    }
  } catch (e) {
    emit("federation", { kind: "failed", error: e.message || String(e) });
  } finally {
    federation = null;
  }
}

/* The size of Pyodide's wasm memory: it only grows, so what a message cost the tab at its peak shows in it. */
function wasmHeapBytes() { return runtime.pyodide._module.HEAP8.length; }

function inFederation() { return federation !== null; }

/* Join the Flower federation at url (default: the site's /flower/) with this tab's model and data
 * (the command table checks the worker is idle first); localDp and requireClipping are the privacy
 * setting (docs/federated.md, "Differential privacy"). */
async function federate({ url = "flower/", heartbeat = 30, poll = 1, localDp = null, requireClipping = false } = {}) {
  const base = new URL(url, BASE).href.replace(/\/+$/, "");
  if (new URL(base).origin !== self.location.origin) {
    throw new UserError("the federation must be served by this site (python build.py serve --flower URL): " +
                        "the page may only talk to its own origin", "FederationError");
  }
  const key = await federationKey();
  const nodeId = await flGet("node:" + base).catch(() => null);
  // privacy (PytrainTrainer's local_dp, require_clipping): localDp {clippingNorm, epsilon, delta} or null
  const local_dp = localDp ? { clipping_norm: localDp.clippingNorm, epsilon: localDp.epsilon, delta: localDp.delta } : null;
  const info = py("federation", { op: "start", url: base, public_key: key.pem, node_id: nodeId || null, heartbeat, poll,
                                  local_dp, require_clipping: !!requireClipping, webcrypto: hasWebCrypto() });
  const f = { stop: false, stopSent: false, wake: null };
  federation = f;
  f.done = federationLoop(f, key, base);
  emit("federation", Object.assign({ kind: "started", url: base, wasm_heap: wasmHeapBytes() }, info));
  return info;
}

/* Leave: the node deactivates and unregisters; resolves once it has. */
async function leaveFederation() {
  const f = federation;
  if (!f) return false;
  f.stop = true;
  if (f.wake) f.wake();
  await f.done;
  return true;
}
