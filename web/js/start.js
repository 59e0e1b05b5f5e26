// The page's worker, started as early as the page can: index.html loads this module first and async,
// so the worker (and its downloads) do not wait for the page's other modules; store.js hands the
// same client to the panels, which listen to it once they load (its boot events, ready and startup,
// reach a listener added late too: WorkerClient.on).

import { WorkerClient, registerServiceWorker } from "./client.js";

// The service worker (../sw.js) caches the runtime so the next visit starts fast; on a first
// visit the Web Worker waits (briefly) for it so the downloads go through it and get cached.
// "?prefetch=digits": the page's first run trains on the site's digits, so its worker downloads them
// while Python starts (worker/data.js prefetchSiteData); the widget's and pytrain-ort.js's do not.
// "&gpu=1" (the page opened with ?gpu=1): train on WebGPU when the browser has an adapter (worker/boot.js installWebGPU).
const gpu = new URLSearchParams(location.search).get("gpu") === "1" ? "&gpu=1" : "";
export const client = new WorkerClient({ workerURL: new URL("../worker.js?prefetch=digits" + gpu, import.meta.url),
                                         startAfter: registerServiceWorker() });
