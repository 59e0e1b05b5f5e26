"""Helpers shared by the browser tests: request recording, contexts, waiting for the app."""
from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence
from urllib.parse import urlsplit

from waits import wait_ms  # noqa: F401  (every browser wait goes through the tests' one factor)

# Loading Pyodide from local files takes ~5-10 s on a quiet 2-core machine.
LOAD_TIMEOUT_MS = wait_ms(60_000)


#: what Chromium requests by itself, not for the page: the icon of a page without <link rel="icon">
#: (the README's host pages). It asks for it when it gets round to it, so whether that request (or an
#: error about it) falls inside a test depends on how long the test ran: the Recorder leaves it out.
#: Nothing else belongs here without a comment saying why the browser makes it on its own.
BROWSER_OWN_PATHS = ("/favicon.ico",)


def browser_own(url: str) -> bool:
    """Whether ``url`` is a request the browser makes by itself (BROWSER_OWN_PATHS), whatever the page does."""
    return urlsplit(url).path in BROWSER_OWN_PATHS


class Recorder:
    """Every request a browser context makes (pages and workers), plus console errors and page errors;
    the browser's own requests (``browser_own``) and console messages about them are left out, so a
    test's assertions on all of them hold however long it runs."""

    def __init__(self) -> None:
        self.urls: List[str] = []
        self.console_errors: List[str] = []

    def request(self, req) -> None:
        if not browser_own(req.url):
            self.urls.append(req.url)

    def console(self, msg) -> None:
        if msg.type == "error" and not browser_own((msg.location or {}).get("url") or ""):
            self.console_errors.append(msg.text)

    def page_error(self, err) -> None:
        self.console_errors.append(str(err))

    def watch(self, page) -> None:
        """Record ``page``'s console errors and uncaught errors (its requests come through the context)."""
        page.on("console", self.console)
        page.on("pageerror", self.page_error)

    def foreign(self, base_url: str) -> List[str]:
        """Requests to anything but the site's own origin (blob:/data: of the page itself are fine)."""
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(base_url))
        bad = []
        for u in self.urls:
            if u.startswith("data:") or u.startswith("blob:" + origin + "/"):
                continue
            parts = urlsplit(u)
            if "{0.scheme}://{0.netloc}".format(parts) != origin:
                bad.append(u)
        return bad


def new_context(browser, recorder: Recorder, longtasks: bool = False):
    """A fresh browser context that records requests (and, optionally, long tasks from page start)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    ctx.set_default_timeout(wait_ms(30_000))    # clicks, fills, selectors without a timeout of their own
    ctx.on("request", recorder.request)
    if longtasks:
        # Installed before any page script runs, so no long task escapes it.
        ctx.add_init_script("""
            window.__longTasks = [];
            try {
              new PerformanceObserver((list) => {
                for (const e of list.getEntries()) window.__longTasks.push({start: e.startTime, duration: e.duration});
              }).observe({entryTypes: ['longtask']});
              window.__longTaskObserver = true;
            } catch (e) { window.__longTaskObserver = false; }
        """)
    return ctx


#: what a test may leave in the site's storage, cleared after each ``second_visit`` test: everything but the Service
#: Worker and its Cache Storage (what makes the next start a second visit: the same files, from the cache)
SITE_STORAGE = "cookies,file_systems,indexeddb,local_storage,websql"


class WarmContext:
    """One browser context lent to one test at a time (``lend``): its requests go to that test's Recorder; after
    the test its pages are closed (their workers end with them, closing their IndexedDB connections) and the site's
    storage is cleared (saved runs, the federation's store, the Device choice in localStorage), so a test finds what
    a returning visitor who cleared the site's data finds: no saved run, the controls' defaults."""

    def __init__(self, browser, site_url: str) -> None:
        self.recorder = Recorder()
        self.lent = False
        self.origin = "{0.scheme}://{0.netloc}".format(urlsplit(site_url))
        self.ctx = new_context(browser, self)

    def request(self, req) -> None:  # the context's request events, for the test holding it
        self.recorder.request(req)

    @contextmanager
    def lend(self, recorder: Recorder) -> Iterator[object]:
        # (lent twice, the inner lend's reset would close the outer holder's pages under it)
        assert not self.lent, "the shared context is lent already (a module's started_app and a test's context?)"
        self.recorder, self.lent = recorder, True
        try:
            yield self.ctx
        finally:
            self.recorder, self.lent = Recorder(), False
            self.reset()

    def reset(self) -> None:
        for page in list(self.ctx.pages):
            page.close()
        blank = self.ctx.new_page()
        cdp = self.ctx.new_cdp_session(blank)
        cdp.send("Storage.clearDataForOrigin", {"origin": self.origin, "storageTypes": SITE_STORAGE})
        cdp.detach()
        blank.close()
        self.ctx.unroute_all()
        self.ctx.clear_cookies()
        self.ctx.clear_permissions()
        self.ctx.set_offline(False)


#: PYTRAIN_TEST_FIRST_VISITS=1: every test its fresh context again, ``second_visit`` or not (to compare, or to rule
#: the shared context out when a test fails)
FIRST_VISITS = bool(os.environ.get("PYTRAIN_TEST_FIRST_VISITS"))


@contextmanager
def lent_or_fresh_context(request, browser, recorder: Recorder, warm: str = "warm_context") -> Iterator[object]:
    """The test's browser context, recorded by ``recorder``: in a module marked ``second_visit`` the session's
    shared one (the fixture named ``warm``, reset after the test), else a fresh one closed after the test."""
    if request.node.get_closest_marker("second_visit") and not FIRST_VISITS:
        with request.getfixturevalue(warm).lend(recorder) as ctx:
            yield ctx
        return
    with fresh_context(browser, recorder) as ctx:
        yield ctx


@contextmanager
def fresh_context(browser, recorder: Recorder) -> Iterator[object]:
    """A fresh browser context recorded by ``recorder`` (a first visit), closed afterwards."""
    ctx = new_context(browser, recorder)
    try:
        yield ctx
    finally:
        ctx.close()


def open_app(ctx, url: str, recorder: Recorder, path: str = ""):
    page = ctx.new_page()
    recorder.watch(page)
    page.goto(url + path)
    return page


#: where the tests' screenshots go: they are for a person to look at the screens (no test reads them), and each
#: full-page PNG costs the browser a render and an encoding, so none is taken unless PYTRAIN_TEST_SHOTS names a folder
SHOTS = os.environ.get("PYTRAIN_TEST_SHOTS") or ""


def shot(target, name: str, full_page: bool = False) -> None:
    """A screenshot of ``target`` (a page or a locator) as ``<PYTRAIN_TEST_SHOTS>/<name>.png``, when that is set."""
    if not SHOTS:
        return
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(Path(SHOTS) / (name + ".png")), **({"full_page": True} if full_page else {}))


def wait_ready(page) -> None:
    page.wait_for_selector("body[data-ready]", state="attached", timeout=LOAD_TIMEOUT_MS)


def app_state(page, expr: str):
    return page.evaluate("() => { const a = window.pytrainApp; return %s; }" % expr)


def app_worker(page):
    """The page's Pyodide worker (``worker.js``, whatever its query string), for evaluating in its scope."""
    return next(w for w in page.workers if w.url.split("?")[0].endswith("/worker.js"))


def configure_training(page, epochs: int, batch_size: Optional[int] = None, lr: Optional[float] = None) -> None:
    """Fill the training controls the test cares about (the others keep their defaults)."""
    page.fill("#epochs", str(epochs))
    if batch_size is not None:
        page.fill("#batch-size", str(batch_size))
    if lr is not None:
        page.fill("#lr", str(lr))


def train_epochs(page, epochs: int, timeout_ms: int, **controls) -> list:
    """Configure, press Start and wait until ``epochs`` epochs are done; returns the page's epochs."""
    configure_training(page, epochs, **controls)
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.epochs.length >= %d && !window.pytrainApp.training" % epochs,
                           timeout=wait_ms(timeout_ms))
    return app_state(page, "a.epochs")


def stop_training(page) -> None:
    """Press Stop if the run is still going (a short run can finish before a click lands, and Stop is
    then disabled), and wait until the page is idle."""
    page.evaluate("() => { const b = document.getElementById('stop'); if (!b.disabled) b.click(); }")
    page.wait_for_function("() => !window.pytrainApp.training", timeout=wait_ms(60_000))


def open_ready(context, url: str):
    """(page, recorder): the app in the test's context, Python loaded."""
    ctx, rec = context
    page = open_app(ctx, url, rec)
    wait_ready(page)
    return page, rec


def build_text_lora(page, model, data: str, tokenizer: Optional[str] = None, block: int = 16,
                    targets: str = "c_attn") -> None:
    """In "Your text": choose ``model`` (a path or paths: the model and the files beside it, or a Hub folder's zip),
    the ``tokenizer`` (None: the one among the model's files) and the text ``data``, LoRA on ``targets``, blocks of
    ``block`` tokens; build and wait for the model."""
    page.click("button[data-tab=text]")
    page.set_input_files("#text-model", model)
    if tokenizer is not None:
        page.set_input_files("#text-tokenizer", tokenizer)
    page.set_input_files("#text-data", data)
    page.fill("#text-block", str(block))
    page.fill("#text-lora-targets", targets)
    page.click("#text-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'text'",
                           timeout=LOAD_TIMEOUT_MS)


def build_digits(page, kind: str = "mlp", count: str = "1000") -> None:
    """Build the digits ``kind`` ("mlp" or "cnn") on ``count`` digits (the first model of the page)."""
    page.click("#tabbtn-digits")
    page.select_option("#digits-model", kind)
    page.select_option("#digits-count", count)
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)


def serve_files(ctx, files: Dict[str, bytes], prefixes: Sequence[str] = ("bench", "ort-test")) -> None:
    """Answer same-origin requests under ``/<prefix>/`` with the given paths' bodies (404 for others
    there); the site serves everything else."""
    types = {".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".json": "application/json",
             ".wasm": "application/wasm"}

    def handler(route, request):
        path = "/" + request.url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
        body = files.get(path)
        if body is None:
            route.fulfill(status=404, body="not found")
            return
        suffix = path[path.rfind("."):] if "." in path.rsplit("/", 1)[-1] else ""
        route.fulfill(status=200, body=body, content_type=types.get(suffix, "application/octet-stream"))

    ctx.route(re.compile(r"^https?://[^/]+/(%s)/" % "|".join(re.escape(p) for p in prefixes)), handler)


CHECKOUT = Path(__file__).resolve().parents[2]


@contextmanager
def checkout_page(browser, path: str, isolated: bool = False, timeout_ms: int = 30_000) -> Iterator[object]:
    """A page of the checkout itself (bench/server.py serves the repository root: node_modules' Pyodide,
    web/kernels, pytrain's sources), optionally cross-origin isolated; closed afterwards."""
    sys.path.insert(0, str(CHECKOUT / "bench"))
    from server import BenchServer  # bench/server.py: static files of the checkout, COOP/COEP on request

    server = BenchServer(CHECKOUT, isolated=isolated)
    ctx = browser.new_context()
    ctx.set_default_timeout(wait_ms(timeout_ms))
    try:
        page = ctx.new_page()
        page.goto(server.origin + path)
        yield page
    finally:
        ctx.close()
        server.close()


def pytrain_sources() -> List[str]:
    """pytrain's Python files, as paths under the checkout (for a checkout page to load)."""
    return sorted(p.relative_to(CHECKOUT).as_posix() for p in (CHECKOUT / "pytrain").rglob("*.py"))
