/* pytrain service worker: a second visit loads the Python runtime from Cache Storage.
 *
 * - Big files that never change within one build (Pyodide, the wheel, kernels, demo artifacts,
 *   the MNIST binary) are cached as they are first fetched and then served cache-first.
 * - The page's code (js, css, the icons) is cache-first too while the visit's page (index.html, the
 *   examples), always fetched from the network first, names this worker's build (build.py stamps
 *   both with the site's hash): a second visit then makes no round trip per script. Another build's
 *   page means a deploy happened: the cache is bypassed (see `outdated`).
 * - Everything else (index.html, config.json, the SuperLink under flower/, ...) is network-first,
 *   with the cache as the offline fallback, so an update shows up on the next load. A page of this
 *   build comes without its head's preloads of Pyodide's files (see withoutPreloads).
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
// the page's own code: fixed within one build (worker.js?prefetch=digits has a query, still its file)
const CODE = /^(?!flower\/).*\.(js|css|svg|ico|png)$/;
// build.py writes the site's hash into every page's <meta name="pytrain-site"> as into VERSION
const STAMP = /<meta name="pytrain-site" content="([^"]*)">/;
// the head's preloads of Pyodide's first files (build.py writes them into index.html for a first visit)
const PRELOADS = /<link rel="preload" href="pyodide\/[^"]*" as="fetch" crossorigin>\s*/g;

// True once index.html or config.json (always fetched from the network first) names another build
// than this worker's: a deploy happened and the new sw.js is not active yet. Until it is, cached
// copies of same-URL files (code, wheel, kernels, artifacts) may be stale, so bypass the cache entirely.
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
  else if (req.mode !== "navigate" && CODE.test(rel)) event.respondWith(cacheFirst(event, req));
  else event.respondWith(networkFirst(event, req, rel === "config.json" ? checkBuild
                                                   : req.mode === "navigate" ? checkPage : null));
});

/* The page's code it loaded before this worker controlled it (js/client.js posts the URLs): cached
 * now, so the next visit makes no round trip for it. Only this site's code files, and not while
 * a deploy is under way. */
self.addEventListener("message", (event) => {
  const urls = (event.data && Array.isArray(event.data.cacheCode)) ? event.data.cacheCode : [];
  event.waitUntil((async () => {
    if (outdated) return;
    const cache = await caches.open(CACHE);
    await Promise.all(urls.map(async (u) => {
      const url = new URL(String(u), self.location.href);
      const rel = url.pathname.slice(SCOPE.length);
      if (url.origin !== self.location.origin || !url.pathname.startsWith(SCOPE) || !CODE.test(rel)) return;
      if (await cache.match(url.href)) return;
      const resp = await fetch(url.href).catch(() => null);
      if (resp && cacheable(resp) && !outdated) await cache.put(url.href, resp).catch(() => {});
    }));
  })());
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

async function networkFirst(event, req, check) {
  try {
    const resp = await fetch(req);
    if (cacheable(resp)) {
      if (check) await check(resp.clone());
      if (!outdated) event.waitUntil(caches.open(CACHE).then((c) => c.put(req, resp.clone())).catch(() => {}));
      if (req.mode === "navigate" && !outdated) return withoutPreloads(resp);
    }
    return resp;
  } catch (err) {
    const hit = await caches.match(req, { cacheName: CACHE });
    if (hit) return hit;
    throw err;   // offline and never cached: the request fails as it would without us
  }
}

/* A page of this build this worker controls, without its head's preloads of Pyodide's files: they are in this
 * worker's cache, where the page's Web Worker reads them. Preloaded, they would be copied into the page (13 MB, the
 * JS decoded as text on its main thread) before its modules run and start that Web Worker. (The body is read
 * whole here as checkPage reads it; the headers stay but the encoding, the new body being plain text.) */
async function withoutPreloads(resp) {
  try {
    const text = await resp.clone().text();
    const stamp = STAMP.exec(text);
    const page = text.replace(PRELOADS, "");
    if (!stamp || stamp[1] !== VERSION || page === text) return resp;
    const headers = new Headers(resp.headers);
    headers.delete("content-encoding");
    headers.delete("content-length");
    return new Response(page, { status: resp.status, statusText: resp.statusText, headers });
  } catch (e) {
    return resp;   // unreadable: the page as it came
  }
}

/* A page of this site: its stamp says which build it belongs to (none: not the app's page, no news). */
async function checkPage(resp) {
  try {
    const stamp = STAMP.exec(await resp.text());
    if (stamp) setOutdated(stamp[1] !== VERSION);
  } catch (e) { /* unreadable: leave the flag alone */ }
}

function setOutdated(value) {
  outdated = value;
  if (outdated) self.registration.update().catch(() => {});   // fetch the new sw.js now
}

async function checkBuild(resp) {
  try {
    setOutdated((await resp.json()).site !== VERSION);
  } catch (e) { /* not JSON: leave the flag alone */ }
}
