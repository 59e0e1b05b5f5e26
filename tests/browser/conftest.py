"""Fixtures for the headless-browser tests: the site is built once, served on a free port in a
thread, and one Chromium instance is shared by every test. Each test gets its own context (IndexedDB and caches
empty: a first visit), except in the modules marked ``second_visit``: their tests share one context whose site
storage is cleared after each test but whose Service Worker cache stays, so the app starts as on a second visit
(~6 CPU s instead of ~9.5)."""
from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


sys.path.insert(0, str(ROOT))
import build  # noqa: E402  (the repository's build.py)
from browser_helpers import Recorder, checkout_page, new_context, pytrain_sources  # noqa: E402


@pytest.fixture(scope="session")
def site_url() -> Iterator[str]:
    """Build the site (only when its sources changed) and serve it on 127.0.0.1:<free port>."""
    site = build.SITE
    site.parent.mkdir(parents=True, exist_ok=True)
    with open(str(site.parent / "site.lock"), "w") as lock:  # one build, whatever the number of pytest-xdist streams
        fcntl.flock(lock, fcntl.LOCK_EX)
        if build.needs_build(site) or not (site / "artifacts").is_dir():
            build.build(site=site)
    server, url = build.serve_in_thread(site)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One headless Chromium for the whole session (tests that need it skip when it is missing)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("browser tests need Chromium at %s (apt-get install chromium)" % CHROMIUM)
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need the playwright package")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


#: Chromium's fake camera, allowed without asking (the "By example" tab records from it)
FAKE_CAMERA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]


@pytest.fixture(scope="session")
def camera_browser(browser) -> Iterator[object]:
    """A headless Chromium with a fake camera, launched once for the "By example" modules (each test still gets
    its own context)."""
    b = browser.browser_type.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + FAKE_CAMERA)
    yield b
    b.close()


@pytest.fixture(scope="session")
def gpu_browser(browser) -> Iterator[object]:
    """A headless Chromium with WebGPU (the SwiftShader adapter needs --enable-unsafe-webgpu), launched by the
    session's playwright (its sync API runs one at a time); shared by the WebGPU modules."""
    gpu = browser.browser_type.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + ["--enable-unsafe-webgpu"])
    yield gpu
    gpu.close()


@pytest.fixture(scope="session")
def gpu_page(gpu_browser) -> Iterator[object]:
    """bench/pages/webgpu_check.html with Pyodide and this checkout's pytrain, its GPU device ready: loaded once for
    every WebGPU module (each module's Python defines what it runs; its start takes ~30 s)."""
    if not (ROOT / "node_modules" / "@pyodide" / "pyodide" / "dist" / "pyodide.js").exists():
        pytest.skip("needs node_modules (npm ci; python build.py test runs it)")
    with checkout_page(gpu_browser, "/bench/pages/webgpu_check.html", timeout_ms=120_000) as page:
        ready = page.evaluate("window.__ready")
        if not ready.startswith("GPU: "):
            pytest.skip("this Chromium gives no WebGPU adapter: " + ready)
        page.evaluate("paths => window.__loadSources(paths)", pytrain_sources())
        yield page


def pytest_configure(config):
    config.addinivalue_line("markers", "second_visit: the module's tests share one browser context whose Service "
                            "Worker cache stays between them (its site storage is cleared after each test), so the "
                            "app starts as on a second visit; for tests that assert nothing about a first visit "
                            "(PYTRAIN_TEST_FIRST_VISITS=1 gives them fresh contexts again)")


#: what a test may leave in the site's storage, cleared after each second-visit test: everything but the Service
#: Worker and its Cache Storage (what makes the next start a second visit: the same files, from the cache)
SITE_STORAGE = "cookies,file_systems,indexeddb,local_storage,websql"


class WarmContext:
    """One browser context lent to one test at a time (``lend``): its requests go to that test's Recorder; after
    the test its pages are closed (their workers end with them, closing their IndexedDB connections) and the site's
    storage is cleared (saved runs, the federation's store, the Device choice in localStorage), so a test finds what
    a returning visitor who cleared the site's data finds: no saved run, the controls' defaults."""

    def __init__(self, browser, site_url: str) -> None:
        self.recorder: Recorder = Recorder()
        self.origin = "{0.scheme}://{0.netloc}".format(urlsplit(site_url))
        self.ctx = new_context(browser, self)

    def request(self, req) -> None:  # the context's request events, for the test holding it
        self.recorder.request(req)

    @contextmanager
    def lend(self, recorder: Recorder) -> Iterator[object]:
        self.recorder = recorder
        try:
            yield self.ctx
        finally:
            self.recorder = Recorder()
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


@pytest.fixture(scope="session")
def warm_context(browser, site_url) -> Iterator[WarmContext]:
    """The context the ``second_visit`` modules share (one per pytest process)."""
    warm = WarmContext(browser, site_url)
    yield warm
    warm.ctx.close()


@pytest.fixture()
def context(request, browser) -> Iterator[tuple]:
    """A browser context and the Recorder watching it: a fresh one closed after the test, or in a ``second_visit``
    module the shared one, reset after the test."""
    rec = Recorder()
    if request.node.get_closest_marker("second_visit") and not os.environ.get("PYTRAIN_TEST_FIRST_VISITS"):
        with request.getfixturevalue("warm_context").lend(rec) as ctx:
            yield ctx, rec
        return
    ctx = new_context(browser, rec)
    yield ctx, rec
    ctx.close()
