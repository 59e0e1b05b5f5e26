"""The embeddable widget: the example host page (createTrainer) and the <pytrain-trainer> element."""
from __future__ import annotations

import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, open_app
from test_page_a11y import axe_violations

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def test_widget_example_trains_and_fires_events(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec, "examples/widget.html")
    page.wait_for_selector("#train:not([disabled])", timeout=LOAD_TIMEOUT_MS)
    page.click("#train")
    page.wait_for_function("() => window.widgetDone !== undefined", timeout=wait_ms(180_000))
    done = page.evaluate("window.widgetDone")
    assert done["reason"] == "finished" and done["epoch"] == 30
    counts = page.evaluate("window.widgetEvents")
    assert counts["ready"] == 1 and counts["prepared"] == 1
    assert counts["epoch"] == 30 and counts["done"] == 1 and counts["progress"] >= 5
    assert counts.get("error", 0) == 0
    page.wait_for_function("() => document.getElementById('log').textContent.includes('train(): resolved: finished')")
    assert axe_violations(page) == []     # the log scrolls: it can be reached from the keyboard

    page.click("#evaluate")
    page.wait_for_function("() => window.widgetEval !== undefined", timeout=wait_ms(30_000))
    assert page.evaluate("window.widgetEval.metric") >= 0.8
    page.click("#export")
    page.wait_for_function("() => window.widgetExport !== undefined", timeout=wait_ms(30_000))
    assert page.evaluate("window.widgetExport") > 200
    # The widget's own UI (in its shadow root) followed along.
    assert "Done" in page.locator(".pytrain-widget .status").inner_text()
    assert rec.foreign(site_url) == []


def test_custom_element_trains_without_code(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec, "examples/element.html")
    page.wait_for_function("() => window.elementEvents.prepared === 1", timeout=LOAD_TIMEOUT_MS)
    page.click("pytrain-trainer button[data-act=train]")     # Playwright pierces the shadow root
    page.wait_for_function("() => window.elementEvents.done === 1", timeout=wait_ms(180_000))
    seen = page.evaluate("window.elementEvents")
    assert seen["epoch"] == 20 and seen["progress"] >= 3 and "error" not in seen
