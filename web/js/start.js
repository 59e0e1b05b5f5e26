// The page's worker, started as early as the page can: index.html loads this module first and async,
// so the worker (and its downloads) do not wait for the page's other modules; store.js hands the
// same client to the panels, which listen to it once they load (its boot events, ready and startup,
// reach a listener added late too: WorkerClient.on).

import { WorkerClient, registerServiceWorker } from "./client.js";

// The service worker (../sw.js) caches the runtime so the next visit starts fast; on a first
// visit the Web Worker waits (briefly) for it so the downloads go through it and get cached.
// "?prefetch=digits": the page's first run trains on the site's digits, so its worker downloads them
// while Python starts (worker/data.js prefetchSiteData); the widget's and pytrain-ort.js's do not.
// "&gpu=1" / "&gpu=0": the GPU on (any WebGPU adapter, a software one too) or off, as the page was opened (?gpu=1,
// ?gpu=0) or as the user last chose (the Train panel's Device, kept in localStorage); neither: auto, a hardware
// adapter only (worker/boot.js installWebGPU).
const asked = new URLSearchParams(location.search).get("gpu");
let chosen = null;
try { chosen = localStorage.getItem("pytrain-gpu"); } catch (e) { /* storage blocked: auto */ }
const gpuMode = asked === "1" ? "on" : asked === "0" ? "off" : chosen === "on" || chosen === "off" ? chosen : "auto";
const gpu = gpuMode === "on" ? "&gpu=1" : gpuMode === "off" ? "&gpu=0" : "";
export const client = new WorkerClient({ workerURL: new URL("../worker.js?prefetch=digits" + gpu, import.meta.url),
                                         startAfter: registerServiceWorker() });
