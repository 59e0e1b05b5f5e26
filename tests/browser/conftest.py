"""Fixtures for the headless-browser tests: the site is built once, served on a free port in a
thread, and one Chromium instance is shared by every test (each test gets its own context, so
IndexedDB and caches start empty)."""
from __future__ import annotations

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
from browser_helpers import Recorder, new_context  # noqa: E402


@pytest.fixture(scope="session")
def site_url() -> Iterator[str]:
    """Build the site (only when its sources changed) and serve it on 127.0.0.1:<free port>."""
    site = build.SITE
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


@pytest.fixture()
def context(browser) -> Iterator[tuple]:
    """A fresh browser context and the Recorder watching it, closed after the test."""
    rec = Recorder()
    ctx = new_context(browser, rec)
    yield ctx, rec
    ctx.close()
