"""One headless Chromium session serving the bench pages from 127.0.0.1.

Each page load gets a fresh browser context (empty cache), so cold start and
bytes transferred are those of a first visit.  Two servers run side by side:
a plain one and a cross-origin-isolated one (COOP/COEP) for wasm threads.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from server import BenchServer, transfer_bytes

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


class BrowserSession:
    """Context manager: servers + playwright + Chromium; run_page() per row."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self._pw = None
        self.browser = None
        self.plain: Optional[BenchServer] = None
        self.isolated: Optional[BenchServer] = None

    def __enter__(self) -> "BrowserSession":
        from playwright.sync_api import sync_playwright

        self.plain = BenchServer(ROOT, isolated=False)
        self.isolated = BenchServer(ROOT, isolated=True)
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        return self

    def __exit__(self, *exc) -> None:
        if self.browser is not None:
            self.browser.close()
        if self._pw is not None:
            self._pw.stop()
        for s in (self.plain, self.isolated):
            if s is not None:
                s.close()

    @property
    def version(self) -> str:
        return self.browser.version if self.browser else ""

    def run_page(self, url_path: str, isolated: bool = False, timeout_s: float = 900) -> dict:
        """Load a bench page in a fresh context, wait for window.__bench, add transfer sizes."""
        server = self.isolated if isolated else self.plain
        server.take_log()
        ctx = self.browser.new_context()
        page = ctx.new_page()
        logs = []
        page.on("console", lambda m: logs.append(m.text))
        page.on("pageerror", lambda e: logs.append(f"pageerror: {e}"))
        t0 = time.perf_counter()
        try:
            page.goto(server.origin + url_path, wait_until="commit")
            page.wait_for_function("window.__bench && window.__bench.status !== 'running'",
                                   timeout=timeout_s * 1000, polling=250)
            state = page.evaluate("window.__bench")
        finally:
            wall = time.perf_counter() - t0
            ctx.close()
        if self.verbose:
            for line in logs:
                print("   console:", line[:300])
        if state["status"] != "done":
            raise RuntimeError(f"{url_path}: {state.get('error')}\n" + "\n".join(logs[-20:]))
        res = state["result"]
        res.update(transfer_bytes(server.take_log()))
        res["wall_s"] = wall
        return res

    def app_start(self, url: str, visits: int = 2, timeout_s: float = 180, prepare=None, reached=None) -> list:
        """Open the web app (build.py's site at ``url``) ``visits`` times in one fresh browser
        context, so later visits load the runtime from the Service Worker cache the first one
        filled; each time build the digits MLP and start training at once, as a user in a hurry
        would. Returns per visit the app's timing (ms from navigation to Python ready and to the
        end of the first training step), the worker's start-up marks (ms since it started) and
        ``stages``: every mark on one clock, ms since navigation, in order. ``prepare(page)`` runs
        before each visit's navigation (bench/network.py emulates a network there) and
        ``reached(page, timing)`` once its first step has ended."""
        ms = timeout_s * 1000

        def visit(page) -> dict:
            if prepare is not None:
                prepare(page)
            page.goto(url)
            page.wait_for_function("() => window.pytrainApp && window.pytrainApp.ready", timeout=ms)
            page.select_option("#digits-model", "mlp")
            page.click("#digits-build")
            page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=ms)
            model_ready = page.evaluate("performance.now()")
            page.fill("#epochs", "1")
            page.click("#start")
            page.wait_for_function("() => window.pytrainApp.timing.firstStep !== null", timeout=ms)
            t = page.evaluate("Object.assign({pageOrigin: performance.timeOrigin, workerCreated: "
                              "(performance.getEntriesByName('pytrain-worker-created')[0] || {}).startTime}, "
                              "window.pytrainApp.timing)")
            t["modelReady"] = model_ready
            t["stages"] = app_stages(t)
            if reached is not None:
                reached(page, t)
            return t

        def stop(page) -> None:
            # (one epoch of the digits may already be over: Stop is then disabled)
            page.evaluate("() => { const b = document.querySelector('#stop'); if (!b.disabled) b.click(); }")
            page.wait_for_function("() => !window.pytrainApp.training", timeout=60_000)

        return self._visits(visits, ms, visit, stop)

    def widget_start(self, url: str, host: str, visits: int = 2, timeout_s: float = 180) -> list:
        """Open ``host`` (a page at the site's root embedding the widget: WIDGET_HOST) ``visits`` times in one
        fresh browser context; per visit the ms from navigation to the widget's first training progress."""
        ms = timeout_s * 1000

        def visit(page) -> dict:
            page.goto(url + host)
            page.wait_for_function("() => window.firstProgress !== undefined", timeout=ms)
            return {"firstProgress": page.evaluate("window.firstProgress")}

        return self._visits(visits, ms, visit, lambda page: page.evaluate("() => window.trainer.stop().catch(() => {})"))

    def _visits(self, visits: int, ms: float, visit, stop) -> list:
        """``visits`` visits in one fresh browser context, each in a new page: ``visit(page)`` (its result kept), the
        files fetched after a first step cached before the next visit (a later visit comes back after the first one
        finished loading), ``stop(page)``."""
        ctx = self.browser.new_context()
        out = []
        try:
            for _ in range(visits):
                page = ctx.new_page()
                out.append(visit(page))
                if len(out) < visits:
                    wait_rest_cached(page, ms)
                stop(page)
                page.close()
        finally:
            ctx.close()
        return out


#: a host page embedding the widget as the README shows (the digits, an MLP), nothing else: its first progress
WIDGET_HOST = """<!doctype html><html lang=en><head><meta charset=utf-8><title>widget start-up</title></head><body>
<div id="trainer"></div>
<script type="module">
import { createTrainer } from "./pytrain-widget.js";
const trainer = window.trainer = createTrainer({ container: document.getElementById("trainer"), data: "digits",
                                                 hidden: [64], epochs: 1 });
trainer.on("progress", () => { if (window.firstProgress === undefined) window.firstProgress = performance.now(); });
trainer.train();
</script></body></html>
"""


#: the files the web app fetches after its first step (worker/data.js loadRest), by config.json's keys
_REST = """async () => {
  const config = await (await fetch("config.json")).json();
  const urls = [config.mnist && config.mnist.first && config.mnist.file,
                config.bytecode && config.bytecode.rest && config.bytecode.rest.file].filter(Boolean);
  for (const u of urls) if (!(await caches.match(new URL(u, location.href).href))) return false;
  return true;
}"""


def wait_rest_cached(page, timeout_ms: float) -> None:
    """Until the Service Worker has cached what the app fetches after its first step (the whole digits,
    the stdlib's second part): a later visit is one that comes back after the first finished loading,
    not one that interrupted it."""
    deadline = time.monotonic() + timeout_ms / 1000
    while not page.evaluate(_REST):
        if time.monotonic() > deadline:
            raise TimeoutError("the app's files after its first step were not cached in time")
        time.sleep(0.1)


def app_stages(t: dict) -> dict:
    """The web app's start-up on the page's clock (ms since navigation): the Web Worker's start,
    the end of each of its stages (each mark is where the next begins), Python ready on the page,
    the digits model built (as the harness saw it, up to one polling interval late) and the
    first training step's end."""
    marks = dict(t.get("startup") or {})
    origin = marks.pop("timeOrigin", None)
    offset = origin - t["pageOrigin"] if origin is not None and t.get("pageOrigin") else 0.0
    names = {"Loading the Python runtime": "worker started", "Loading numpy": "Pyodide started",
             "Installing pytrain": "numpy loaded", "Starting pytrain": "pytrain zip mounted",
             "kernels loaded": "wasm kernels loaded", "kernels linked": "numpy imported + kernels linked",
             "session made": "pytrain imported", "Ready": "worker ready"}
    stages = {"page made its worker": t["workerCreated"]} if t.get("workerCreated") is not None else {}
    if origin is not None and t.get("pageOrigin"):
        stages["worker's time origin"] = offset
    for key, value in sorted(marks.items(), key=lambda kv: kv[1]):
        stages[names.get(key, key)] = offset + value
    stages["page ready"] = t.get("ready")
    stages["model built"] = t.get("modelReady")
    stages["first step"] = t.get("firstStep")
    return {k: v for k, v in stages.items() if v is not None}
