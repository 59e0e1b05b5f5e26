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
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
#: PYTRAIN_TEST_CHROMIUM_ARGS: more flags, space-separated, for every browser the tests launch (to measure one's
#: effect, bench/app_start_cpu.py and bench/suite_cpu.py; the suite itself sets none)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"] + os.environ.get("PYTRAIN_TEST_CHROMIUM_ARGS", "").split()


#: how often a test's ``wait_for_function`` evaluates its predicate when the call names no ``polling``: every 50 ms
#: (``PYTRAIN_TEST_POLL_MS``; ``raf`` for Playwright's own default). Playwright's default polls on every animation
#: frame, which keeps the renderer drawing frames for as long as the wait lasts: 0.06-0.10 CPU s per second of wait
#: (renderer and GPU process) against 0.01 at 50-100 ms (bench/RESULTS.md "The test suite's CPU"), over the tests'
#: waits for trainings, builds and rounds. The predicates wait for states that stay (a ready model, an epoch count,
#: training over); a test whose state is brief records it from the page's own events (page_walk.py's hooks).
POLL_MS = os.environ.get("PYTRAIN_TEST_POLL_MS", "50")


def _poll_by_interval() -> None:
    from playwright.sync_api import Frame, Page

    for cls in (Page, Frame):
        if getattr(cls.wait_for_function, "_pytrain_interval", False):
            continue
        def wait_for_function(self, expression, *, arg=None, polling=None, timeout=None, _orig=cls.wait_for_function):
            return _orig(self, expression, arg=arg, timeout=timeout,
                         polling=polling if polling is not None else float(POLL_MS))
        wait_for_function._pytrain_interval = True
        wait_for_function.__doc__ = cls.wait_for_function.__doc__
        cls.wait_for_function = wait_for_function


if POLL_MS != "raf":
    try:
        _poll_by_interval()
    except ImportError:  # no playwright: the browser fixture skips
        pass

sys.path.insert(0, str(ROOT))
import build  # noqa: E402  (the repository's build.py)
from browser_helpers import (Recorder, WarmContext, checkout_page, lent_or_fresh_context, open_app,  # noqa: E402
                             pytrain_sources, wait_ready)


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


@pytest.fixture(scope="session")
def warm_context(browser, site_url) -> Iterator[WarmContext]:
    """The context the ``second_visit`` modules share (one per pytest process)."""
    warm = WarmContext(browser, site_url)
    yield warm
    warm.ctx.close()


@pytest.fixture(scope="session")
def warm_camera_context(camera_browser, site_url) -> Iterator[WarmContext]:
    """The camera browser's context the ``second_visit`` "By example" modules share."""
    warm = WarmContext(camera_browser, site_url)
    yield warm
    warm.ctx.close()


@pytest.fixture(scope="session")
def warm_gpu_context(gpu_browser, site_url) -> Iterator[WarmContext]:
    """The WebGPU browser's context test_webgpu.py's app pages share (its page runs and the widget: one first visit,
    then second visits; reset after each as the ``second_visit`` modules' context is)."""
    warm = WarmContext(gpu_browser, site_url)
    yield warm
    warm.ctx.close()


@pytest.fixture(scope="module")
def started_app(request, browser, site_url) -> Iterator[tuple]:
    """(page, recorder): the app started once for a whole module whose tests need only a started app and each set
    what they use through the page's own controls (none asserts a first visit, a fresh page's defaults or what an
    earlier test may have left: its errors, its model); in a ``second_visit`` module the shared context, lent for
    the module (its tests then take no ``context``)."""
    rec = Recorder()
    with lent_or_fresh_context(request, browser, rec) as ctx:
        page = open_app(ctx, site_url, rec)
        wait_ready(page)
        yield page, rec


@pytest.fixture()
def context(request, browser) -> Iterator[tuple]:
    """A browser context and the Recorder watching it: a fresh one closed after the test, or in a ``second_visit``
    module the shared one, reset after the test."""
    rec = Recorder()
    with lent_or_fresh_context(request, browser, rec) as ctx:
        yield ctx, rec
