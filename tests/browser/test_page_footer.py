"""The footer names the Pyodide the page ships (0.17.1), like everything else."""
from __future__ import annotations

import pytest

import json
from pathlib import Path

from browser_helpers import open_app, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

ROOT = Path(__file__).resolve().parents[2]


def test_footer_names_the_shipped_pyodide(context, site_url):
    ctx, rec = context
    shipped = json.loads((ROOT / "node_modules" / "@pyodide" / "pyodide" / "package.json").read_text())["version"]
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    footer = page.inner_text("#versions")
    assert "Pyodide %s" % shipped in footer, footer
    assert shipped == "0.17.1"
