/* pytrain worker: runs Pyodide + pytrain off the main thread, for the page, the widget and
 * pytrain-ort.js alike. Its protocol (requests, replies, events) is declared in js/protocol.js.
 *
 * A classic (non-module) worker because Pyodide 0.17 loads itself with importScripts, which a
 * module worker does not have. Its rooms are classic scripts too, loaded here in order (each
 * uses only what the ones before it define, and what later ones define once a command runs):
 *
 *   worker/messages.js     replies, events and the errors commands answer with
 *   kernels/kernels.js     the wasm kernels' loader (which build this browser runs: kernelBuild)
 *   worker/boot.js         Pyodide's start, the bytecode bundle, pytrain's zip, the wasm kernels
 *   worker/bridge.js       the Python bridge: the call codec over pytrain.webapp.call
 *   worker/store.js        the saved run in IndexedDB and the run's history
 *   worker/data.js         the site's digits and demo artifacts, uploaded images decoded
 *   worker/training.js     the training loop (slices of ~150 ms, events, saves)
 *   worker/secagg_crypto.js SecAgg+'s public-key crypto with WebCrypto (P-384 ECDH, HKDF, Fernet)
 *   worker/federation.js   "Join a federation" (Flower): signing with WebCrypto, sending, sleeping
 *   worker/commands.js     the declarative command table and the message dispatcher
 */
"use strict";

self.importScripts("js/protocol.js", "worker/messages.js", "kernels/kernels.js", "worker/boot.js", "worker/bridge.js", "worker/store.js",
                   "worker/data.js", "worker/training.js",
                   "worker/secagg_crypto.js", "worker/federation.js", "worker/commands.js");

/** Resolved once pytrain is importable; every command but the early ones waits for it. */
const ready = loadRuntime().catch((e) => {
  console.error(e);
  emit("fatal", { type: "LoadError", message: "Could not start Python in this tab: " + (e.message || e) });
  throw new UserError("Python failed to load: " + (e.message || e), "LoadError");
});
ready.catch(() => {});
