// The page-side half of the worker protocol (declared in ./protocol.js; the other half is ../worker.js).
// Shared by the app, the widget and pytrain-ort.js: requests get promises, worker events become DOM events.

import "./protocol.js";   // a classic script the worker loads too: it defines globalThis.pytrainProtocol

/** The protocol's command and event names (see ./protocol.js). */
export const { COMMANDS, EVENTS, RUN_EVENTS } = globalThis.pytrainProtocol;
const KNOWN_COMMANDS = new Set(COMMANDS);

const DEFAULT_WORKER = new URL("../worker.js", import.meta.url);
// the worker's events that happen once: a listener added after one still hears it (see on)
const ONCE = new Set(["ready", "startup", "fatal"]);
const SERVICE_WORKER = new URL("../sw.js", import.meta.url);

/**
 * Register the site's service worker (../sw.js caches the Python runtime for the next visit).
 * Returns what the Web Worker waits for: null when it may start at once (the page is already
 * controlled, a later visit: the browser checks for an update meanwhile; or service workers are
 * unavailable), so a WorkerClient given it creates its worker within the caller's own task, not a
 * task later; on a first visit a promise that resolves (never rejects) once the new service worker
 * is active (at most waitMs), so that the runtime downloaded now is cached as it arrives.
 */
export function registerServiceWorker(waitMs = 3000) {
  const sw = navigator.serviceWorker;   // undefined on http:// other than localhost, or when disabled
  if (!sw || SERVICE_WORKER.origin !== location.origin) return null;
  if (sw.controller) {
    sw.register(SERVICE_WORKER).catch((e) => console.warn("pytrain: service worker:", e));
    return null;
  }
  return firstRegistration(sw, waitMs);
}

async function firstRegistration(sw, waitMs) {
  try {
    const reg = await sw.register(SERVICE_WORKER);
    const fresh = reg.installing || reg.waiting || (reg.active && reg.active.state === "activating" ? reg.active : null);
    if (!fresh) return false;   // e.g. a hard reload: registered, but this page bypasses it
    return await new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), waitMs);
      const check = () => {
        if (fresh.state === "activated" || fresh.state === "redundant") { clearTimeout(timer); resolve(fresh.state === "activated"); }
      };
      fresh.addEventListener("statechange", check);
      check();
    });
  } catch (e) {
    console.warn("pytrain: no service worker, every visit downloads the runtime:", e);
    return false;
  }
}

/* The page's own scripts and styles loaded before the service worker controlled it (a first visit):
 * handed to it once Python is ready (the network is quiet then), so the next visit's page comes
 * from its cache too (../sw.js keeps only its site's code files). */
function cachePageCode() {
  const sw = navigator.serviceWorker && navigator.serviceWorker.controller;
  if (!sw || !self.performance) return;
  const urls = performance.getEntriesByType("resource").map((e) => e.name)
    .filter((u) => new URL(u).origin === location.origin);
  sw.postMessage({ cacheCode: urls });
}

/**
 * A Pyodide + pytrain worker. Events: the protocol's EVENTS (loading, ready, startup, fatal, progress, epoch,
 * saved, state, done, error, federation).
 * startAfter: a promise to wait for before the Web Worker is created (calls made meanwhile are queued); null: at once.
 */
export class WorkerClient extends EventTarget {
  constructor({ workerURL = DEFAULT_WORKER, startAfter = null } = {}) {
    super();
    this._nextId = 1;
    this._pending = new Map();
    this._queued = [];
    this._once = new Map();   // ONCE event -> its data, once it happened
    this.versions = null;
    this.worker = null;
    const start = () => {
      if (this._queued === null) return;   // terminated before it started
      if (self.performance && performance.mark) performance.mark("pytrain-worker-created");   // (the bench's start-up stages)
      this.worker = new Worker(workerURL);
      this.worker.onmessage = (e) => this._onMessage(e.data);
      this.worker.onerror = (e) => {
        e.preventDefault();
        this._emit("fatal", { type: "WorkerError", message: `the worker failed: ${e.message || "unknown error"}` });
      };
      for (const [msg, transfer] of this._queued) this.worker.postMessage(msg, transfer);
      this._queued = [];
    };
    if (startAfter) Promise.resolve(startAfter).then(start, start);
    else start();
    this.ready = new Promise((resolve, reject) => {
      this.addEventListener("ready", (e) => { this.versions = e.detail; resolve(e.detail); cachePageCode(); }, { once: true });
      this.addEventListener("fatal", (e) => reject(Object.assign(new Error(e.detail.message), e.detail)), { once: true });
    });
    this.ready.catch(() => {});   // callers that care await it; avoid unhandled-rejection noise
  }

  /** Send a command; resolves with its result or rejects with an Error carrying {type, expected}. */
  call(cmd, args = {}, transfer = []) {
    if (!KNOWN_COMMANDS.has(cmd)) return Promise.reject(Object.assign(new Error(`unknown command ${cmd}`), { type: "UnknownCommand" }));
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject });
      if (this.worker) this.worker.postMessage({ id, cmd, args }, transfer);
      else if (this._queued) this._queued.push([{ id, cmd, args }, transfer]);
      else { this._pending.delete(id); reject(new Error("the worker was stopped")); }
    });
  }

  /** How many commands await their reply (the tests wait for none). */
  get pendingCalls() { return this._pending.size; }

  /** Listen to one event type; the handler gets the event's data (at once for a boot event that
   * already happened: the worker may start before the page's modules listen). Returns an unsubscribe function. */
  on(type, handler) {
    const fn = (e) => handler(e.detail);
    this.addEventListener(type, fn);
    if (this._once.has(type)) queueMicrotask(() => handler(this._once.get(type)));
    return () => this.removeEventListener(type, fn);
  }

  terminate() {
    if (this.worker) this.worker.terminate();
    this._queued = null;
    for (const { reject } of this._pending.values()) reject(new Error("the worker was stopped"));
    this._pending.clear();
  }

  _emit(type, detail) {
    if (ONCE.has(type)) this._once.set(type, detail);
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _onMessage(msg) {
    if (msg.id !== undefined) {
      const p = this._pending.get(msg.id);
      if (!p) return;
      this._pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.result);
      else p.reject(Object.assign(new Error(msg.error.message), msg.error));
      return;
    }
    if (msg.event) this._emit(msg.event, msg.data);
  }
}
