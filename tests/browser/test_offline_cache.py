"""The service worker (web/sw.js): a second visit loads the Python runtime from Cache Storage.

The site is served by a request-counting copy of build.py's server on its own port (its own
origin, so no other test's service worker or cache is involved). One browser context visits
the page twice: the first visit fills the cache through the service worker, the second must not
ask the server for the heavy Pyodide files at all, and must still reach "ready" and train.
"""
from __future__ import annotations

import collections
import http.server
import json
import threading
from urllib.parse import urlsplit

import pytest

import build
from browser_helpers import LOAD_TIMEOUT_MS, Recorder, app_state, app_worker, new_context, open_app, stop_training, wait_ready

HEAVY = ("pyodide.asm.wasm", "pyodide.asm.data", "pyodide.asm.js", "numpy.data")
#: the page's code, cache-first for a page of the service worker's own build (the site's worker.js
#: holds its rooms, worker/*.js: build.py inlines them)
CODE = ("/worker.js", "/js/app.js", "/js/client.js", "/js/protocol.js", "/styles.css")
#: {"stamp": another build's hash for index.html to carry} (None: the site's own)
DEPLOYED = {"stamp": None}


@pytest.fixture()
def counting_site(site_url):
    """(base URL, Counter of GET paths) for build.SITE (site_url made sure it is built)."""
    hits: collections.Counter = collections.Counter()
    lock = threading.Lock()

    class Counting(build.SiteHandler):
        root = build.SITE

        def do_GET(self):  # noqa: N802 - stdlib naming
            path = urlsplit(self.path).path
            with lock:
                hits[path] += 1
            if path in ("/", "/index.html") and DEPLOYED["stamp"]:   # index.html as another build's
                page = (build.SITE / "index.html").read_text(encoding="utf-8")
                stamp = json.loads((build.SITE / "config.json").read_text())["site"]
                assert page.count(stamp) == 1, "index.html carries the site's hash once"
                self._reply(200, page.replace(stamp, DEPLOYED["stamp"]).encode(), "text/html; charset=utf-8")
                return
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/" % server.server_address[1], hits
    server.shutdown()
    server.server_close()


def _visit_and_train_one_step(ctx, url, rec):
    """Open the page, wait for Python, build the digits MLP, start, stop after the first progress."""
    page = open_app(ctx, url, rec)
    wait_ready(page)
    page.select_option("#digits-model", "mlp")
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    page.fill("#epochs", "1")
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.timing.firstStep !== null", timeout=LOAD_TIMEOUT_MS)
    stop_training(page)
    # the stdlib's second part, fetched after the first step (worker/data.js loadStdlibRest), is in
    assert app_worker(page).evaluate("() => loadStdlibRest().then(() => restWritten)") is True
    return page, app_state(page, "a.timing")


def test_second_visit_loads_the_runtime_from_the_service_worker_cache(browser, counting_site):
    url, hits = counting_site
    config = json.loads((build.SITE / "config.json").read_text())
    pyodide_path = "/" + config["pyodide"]["indexURL"]
    rec = Recorder()
    ctx = new_context(browser, rec)
    responses = []   # (url, served by the service worker?) for every response the context sees
    ctx.on("response", lambda r: responses.append((r.url, r.from_service_worker)))
    try:
        first, first_timing = _visit_and_train_one_step(ctx, url, rec)
        # The first visit registered sw.js, and the worker's downloads went through it into the cache.
        assert first.evaluate("navigator.serviceWorker.ready.then((r) => !!r.active)")
        cache_names = first.evaluate("caches.keys()")
        assert cache_names == ["pytrain-" + config["site"]], cache_names
        cached = first.evaluate("caches.open(%r).then((c) => c.keys()).then((ks) => ks.map((r) => r.url))"
                                % cache_names[0])
        for name in HEAVY:
            assert url.rstrip("/") + pyodide_path + name in cached, name
        pytrain_zip = (config.get("python") or {}).get("zip", config["wheel"])   # what the worker imports
        assert url.rstrip("/") + "/" + pytrain_zip in cached
        rest = config["bytecode"]["rest"]["file"]
        assert url.rstrip("/") + "/" + rest in cached and hits["/" + rest] == 1
        assert url.rstrip("/") + "/" + config["mnist"]["file"] in cached
        first_versions = app_state(first, "a.versions")
        first_hits = dict(hits)
        assert all(first_hits.get(pyodide_path + name) == 1 for name in HEAVY), first_hits
        first.close()

        hits.clear()
        del responses[:]
        second, second_timing = _visit_and_train_one_step(ctx, url, rec)
        assert second.evaluate("navigator.serviceWorker.controller !== null")
        # No network hit for the runtime, the wheel or the digits; the Web Worker was served by sw.js.
        for path in [pyodide_path + n for n in HEAVY] + ["/" + p for p in (pytrain_zip, config["mnist"]["file"], rest)]:
            assert hits.get(path, 0) == 0, (path, dict(hits))
        for name in HEAVY:
            served = [sw for u, sw in responses if u.endswith(pyodide_path + name)]
            assert served and all(served), (name, served)
        # index.html and config.json stay network-first, so updates show up; the code of the same
        # build comes from the cache without a round trip.
        assert hits.get("/config.json", 0) >= 1 and hits.get("/", 0) >= 1, dict(hits)
        assert [p for p in CODE if hits.get(p, 0)] == [], dict(hits)
        assert not [p for p in hits if p.startswith("/worker/")], dict(hits)
        assert app_state(second, "a.versions") == first_versions   # cached kernels link as before
        assert app_state(second, "a.errors") == []
        assert rec.foreign(url) == []          # the privacy promise holds with the service worker
        assert rec.console_errors == []
        second.close()

        # A deploy: index.html names another build than the service worker's, so the code comes
        # from the network again (the page never runs a cached script of the old build with it).
        hits.clear()
        DEPLOYED["stamp"] = "0123456789abcdef"
        try:
            third = open_app(ctx, url, rec)
            wait_ready(third)
        finally:
            DEPLOYED["stamp"] = None
        assert all(hits.get(p, 0) >= 1 for p in CODE), dict(hits)
        print("\ntime since navigation start (ms): first visit ready %.0f, first step %.0f; "
              "second visit ready %.0f, first step %.0f"
              % (first_timing["ready"], first_timing["firstStep"], second_timing["ready"], second_timing["firstStep"]))
    finally:
        ctx.close()
