"""Fixtures for the headless-browser tests: the site is built once, served on a free port in a
thread, and one Chromium instance is shared by every test (each test gets its own context, so
IndexedDB and caches start empty)."""
from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from typing import Iterator

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


@pytest.fixture()
def context(browser) -> Iterator[tuple]:
    """A fresh browser context and the Recorder watching it, closed after the test."""
    rec = Recorder()
    ctx = new_context(browser, rec)
    yield ctx, rec
    ctx.close()
