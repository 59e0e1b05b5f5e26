/* pytrain service worker: a second visit loads the Python runtime from Cache Storage.
 *
 * - Big files that never change within one build (Pyodide, the wheel, kernels, demo artifacts,
 *   the MNIST binary) are cached as they are first fetched and then served cache-first.
 * - Everything else (index.html, js, config.json, ...) is network-first, with the cache as the
 *   offline fallback, so an update shows up on the next load.
 *
 * VERSION is replaced by build.py with a hash of the whole site, which is also written to
 * config.json as "site". A new build therefore changes sw.js's bytes (the browser installs it)
 * and the cache name (activate deletes the old caches), so files of two builds never mix.
 * The page starts its Web Worker once this service worker is active (js/client.js), so the
 * worker's fetches, importScripts and XHRs come through here too, even on the first visit.
 */
"use strict";

const VERSION = "__PYTRAIN_SITE_HASH__";
const PREFIX = "pytrain-";
const CACHE = PREFIX + VERSION;
const SCOPE = new URL("./", self.location.href).pathname;
const IMMUTABLE = /^(pyodide\/|wheels\/|kernels\/|artifacts\/|data\/mnist-)/;

// True once config.json (always fetched from the network first) names another build than this
// worker's: a deploy happened and the new sw.js is not active yet. Until it is, cached copies of
// same-URL files (wheel, kernels, artifacts) may be stale, so bypass the cache entirely.
let outdated = false;

self.addEventListener("install", () => self.skipWaiting());

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) {
      if (key.startsWith(PREFIX) && key !== CACHE) await caches.delete(key);
    }
    await self.clients.claim();   // control the page (and its worker) of this first visit
  })());
});

self.addEventListener("fetch", (event) => {
  const req = event.request;
  const url = new URL(req.url);
  // Only our own site's plain GETs; anything else goes to the network untouched.
  if (req.method !== "GET" || req.headers.has("range") || url.origin !== self.location.origin ||
      !url.pathname.startsWith(SCOPE)) return;
  const rel = url.pathname.slice(SCOPE.length);
  if (IMMUTABLE.test(rel) && !url.search) event.respondWith(cacheFirst(event, req));
  else event.respondWith(networkFirst(event, req, rel === "config.json"));
});

function cacheable(resp) {
  return resp.status === 200 && resp.type === "basic";
}

async function cacheFirst(event, req) {
  if (outdated) return fetch(req);
  const cache = await caches.open(CACHE);
  const hit = await cache.match(req);
  if (hit) return hit;
  const resp = await fetch(req);
  if (cacheable(resp)) event.waitUntil(cache.put(req, resp.clone()).catch(() => {}));
  return resp;
}

async function networkFirst(event, req, isConfig) {
  try {
    const resp = await fetch(req);
    if (cacheable(resp)) {
      if (isConfig) await checkBuild(resp.clone());
      if (!outdated) event.waitUntil(caches.open(CACHE).then((c) => c.put(req, resp.clone())).catch(() => {}));
    }
    return resp;
  } catch (err) {
    const hit = await caches.match(req, { cacheName: CACHE });
    if (hit) return hit;
    throw err;   // offline and never cached: the request fails as it would without us
  }
}

async function checkBuild(resp) {
  try {
    const site = (await resp.json()).site;
    outdated = site !== VERSION;
    if (outdated) self.registration.update().catch(() => {});   // fetch the new sw.js now
  } catch (e) { /* not JSON: leave the flag alone */ }
}
