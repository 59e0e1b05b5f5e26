/* The store: the saved run in IndexedDB ("pytrain-web", one object store), written after every
 * epoch, on pause and stop, and read back to resume; and the run's history (losses, epochs) that
 * the plots are rebuilt from. */
"use strict";

const DB_NAME = "pytrain-web";
const DB_STORE = "run";

let history = { losses: [], epochs: [] };
let savedVersions = { data: -1, artifacts: -1 };

function openDB() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(DB_STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function dbGet(keys) {
  const db = await openDB();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(DB_STORE, "readonly");
      const store = tx.objectStore(DB_STORE);
      const out = {};
      for (const k of keys) store.get(k).onsuccess = (e) => { out[k] = e.target.result; };
      tx.oncomplete = () => resolve(out);
      tx.onerror = () => reject(tx.error);
    });
  } finally { db.close(); }
}

/* One transaction, so a reload mid-write leaves either the old run or the new one. */
async function dbPut(entries, clear) {
  const db = await openDB();
  try {
    await new Promise((resolve, reject) => {
      const tx = db.transaction(DB_STORE, "readwrite");
      const store = tx.objectStore(DB_STORE);
      if (clear) store.clear();
      for (const [k, v] of Object.entries(entries)) store.put(v, k);
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error || new Error("IndexedDB write aborted"));
    });
  } finally { db.close(); }
}

/* A new run (other data or model): its history starts empty and the next save writes everything. */
function startNewRun() {
  history = { losses: [], epochs: [] };
  savedVersions = { data: -1, artifacts: -1 };
}

/** Losses of the steps first, first + 1, ... (for the plots after a reload). */
function recordSteps(first, losses) {
  // (steps from `first` on were trained before: the GPU failed and the CPU went back to its last read back)
  while (history.losses.length && history.losses[history.losses.length - 1][0] >= first) history.losses.pop();
  losses.forEach((l, i) => history.losses.push([first + i, l]));
}

function recordEpoch(rec) { history.epochs.push(rec); }

/** Back to the last good step after a divergence: the plots' history up to there. */
function trimHistory(step) {
  history = { losses: history.losses.filter((p) => p[0] <= step), epochs: history.epochs.filter((e) => e.step <= step) };
  return history;
}

/** The history of a run that came back (saved, or a run file): the plots' points so far. */
function adoptHistory(h) {
  history = h && h.losses && h.epochs ? h : { losses: [], epochs: [] };
  return history;
}

/** The run's history as the plots have it (a run file carries it). */
function runHistory() { return history; }

/** The restored run is the saved one: its history, and later saves keep its stored data/artifacts. */
function adoptSavedRun(meta, status) {
  savedVersions = { data: status.data_version, artifacts: status.artifacts_version };
  return adoptHistory(meta.history);
}

async function saveRun(reason) {
  await gpuToHeap();   // (the parameters the GPU trained, into the heap's checkpoint)
  const streamed = await gpuCheckpoint();   // (the optimizer state on the GPU only: streamed, moment by moment)
  const snap = py("snapshot", { data_version: savedVersions.data, artifacts_version: savedVersions.artifacts,
                                checkpoint: !streamed });
  if (streamed) snap.checkpoint = streamed;
  const meta = Object.assign({}, snap.meta, {
    savedAt: Date.now(), reason, history, train: trainingOptions(),
  });
  const entries = { meta, checkpoint: snap.checkpoint };
  if (snap.artifacts) entries.artifacts = snap.artifacts;
  if (snap.data !== undefined) entries.data = snap.data;
  // Artifacts or data changed since the last save: this is a new run, replace everything.
  await dbPut(entries, snap.artifacts !== undefined);
  savedVersions = { data: meta.data_version, artifacts: meta.artifacts_version };
  const info = { epoch: meta.epoch, step: meta.step, epochStep: meta.epoch_step, digest: meta.digest, savedAt: meta.savedAt, reason };
  emit("saved", info);
  return info;
}

function summarizeMeta(meta) {
  if (!meta) return null;
  return {
    epoch: meta.epoch, step: meta.step, epochStep: meta.epoch_step, digest: meta.digest, savedAt: meta.savedAt,
    model: meta.model, dataSource: meta.data_source, train: meta.train, history: meta.history, reason: meta.reason,
  };
}
