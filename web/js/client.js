// The page-side half of the worker protocol (the other half is ../worker.js).
// Shared by the app and the widget: requests get promises, worker events become DOM events.

const DEFAULT_WORKER = new URL("../worker.js", import.meta.url);

/** A Pyodide + pytrain worker. Events: loading, ready, fatal, progress, epoch, saved, state, done, error. */
export class WorkerClient extends EventTarget {
  constructor({ workerURL = DEFAULT_WORKER } = {}) {
    super();
    this._nextId = 1;
    this._pending = new Map();
    this.versions = null;
    this.worker = new Worker(workerURL);
    this.worker.onmessage = (e) => this._onMessage(e.data);
    this.worker.onerror = (e) => {
      e.preventDefault();
      this._emit("fatal", { type: "WorkerError", message: `the worker failed: ${e.message || "unknown error"}` });
    };
    this.ready = new Promise((resolve, reject) => {
      this.addEventListener("ready", (e) => { this.versions = e.detail; resolve(e.detail); }, { once: true });
      this.addEventListener("fatal", (e) => reject(Object.assign(new Error(e.detail.message), e.detail)), { once: true });
    });
    this.ready.catch(() => {});   // callers that care await it; avoid unhandled-rejection noise
  }

  /** Send a command; resolves with its result or rejects with an Error carrying {type, expected}. */
  call(cmd, args = {}, transfer = []) {
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, cmd, args }, transfer);
    });
  }

  /** Listen to one event type; the handler gets the event's data. Returns an unsubscribe function. */
  on(type, handler) {
    const fn = (e) => handler(e.detail);
    this.addEventListener(type, fn);
    return () => this.removeEventListener(type, fn);
  }

  terminate() {
    this.worker.terminate();
    for (const { reject } of this._pending.values()) reject(new Error("the worker was stopped"));
    this._pending.clear();
  }

  _emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }

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
