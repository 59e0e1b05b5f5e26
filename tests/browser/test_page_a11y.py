"""Accessibility. axe-core (npm devDependency, injected from node_modules)
finds no violation on any screen; live regions announce milestones only; tabs follow the arrow
keys; focus survives buttons that disable themselves; the drawing pad works from the keyboard;
the plots have a table."""
from __future__ import annotations

from pathlib import Path

import pytest

from browser_helpers import SHOTS, wait_ms, LOAD_TIMEOUT_MS, app_state, open_app, shot, train_epochs, wait_ready
from test_page_csv import messy_csv

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"


def axe_violations(page):
    """axe-core's violations on the page as it is now (evaluated over CDP, so the page's CSP allows it)."""
    assert AXE.is_file(), "axe-core is missing: run `npm ci` (package.json lists it as a devDependency)"
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;0")
    return page.evaluate("""async () => (await axe.run(document)).violations.map(
        (v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).slice(0, 4).join(', ')}`)""")


def shoot(page, name):
    """The screen at a desktop's and a phone's width, for a person to look at (PYTRAIN_TEST_SHOTS)."""
    if not SHOTS:
        return
    for w, h in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": w, "height": h})
        shot(page, "%s-%d" % (name, w), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})


def test_every_screen_has_no_axe_violation(context, site_url, tmp_path):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    assert axe_violations(page) == []
    shoot(page, "start")
    page.select_option("#digits-count", "1000")
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, 1, 120_000, batch_size=64, lr=0.003)
    page.click("details.plot-table summary")
    assert axe_violations(page) == []
    shoot(page, "trained")
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(messy_csv(tmp_path / "messy.csv")))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 6", timeout=wait_ms(30_000))
    assert axe_violations(page) == []
    shoot(page, "table")
    page.click("button[data-tab=model]")
    page.set_input_files("#data-csv-file", files=[{"name": "x.csv", "mimeType": "text/csv", "buffer": b"\x00\x01"}])
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    assert axe_violations(page) == []
    shoot(page, "model-error")
    # the resume banner after a reload
    page.reload()
    page.wait_for_selector("#resume-banner", state="visible", timeout=wait_ms(30_000))
    wait_ready(page)
    assert axe_violations(page) == []
    shoot(page, "resume")
    for path in ("examples/widget.html", "examples/element.html"):
        page.goto(site_url + path)
        page.wait_for_load_state("networkidle")
        assert axe_violations(page) == [], path


def test_keyboard_focus_live_regions_and_plot_table(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    # tabs: arrow keys move the selection and the focus, Home/End jump
    page.focus("#tabbtn-digits")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.id") == "tabbtn-table"
    assert page.get_attribute("#tabbtn-table", "aria-selected") == "true" and page.locator("#tab-table").is_visible()
    page.keyboard.press("End")
    assert page.evaluate("document.activeElement.id") == "tabbtn-text" and page.locator("#tab-text").is_visible()
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("document.activeElement.id") == "tabbtn-examples" and page.locator("#tab-examples").is_visible()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.id") == "tabbtn-digits"
    assert page.get_attribute("#tabbtn-table", "tabindex") == "-1"

    # Build and Start disable themselves: the focus stays on a control, never the page body
    page.select_option("#digits-count", "1000")
    page.focus("#digits-build")
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready "
                           "&& !document.getElementById('digits-build').disabled", timeout=LOAD_TIMEOUT_MS)
    assert page.evaluate("document.activeElement !== document.body")
    page.fill("#epochs", "3")
    page.fill("#batch-size", "16")     # 63 batches per epoch: long enough to watch
    page.evaluate("""() => {
        window.__live = 0;
        const obs = new MutationObserver((m) => { window.__live += m.length; });
        for (const el of document.querySelectorAll('[aria-live]')) obs.observe(el, {childList: true, characterData: true, subtree: true});
    }""")
    page.focus("#start")
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.pytrainApp.training", timeout=wait_ms(30_000))
    assert page.evaluate("document.activeElement.id") in ("pause", "stop")
    # 20 steps of training: many visible updates, but at most a few announcements (start, an epoch)
    page.wait_for_function("() => window.pytrainApp.step > 20", timeout=wait_ms(30_000))
    assert page.evaluate("window.__live") <= 4, page.evaluate("window.__live")
    page.wait_for_function("() => !window.pytrainApp.training", timeout=wait_ms(180_000))
    assert page.evaluate("document.activeElement !== document.body")
    said = app_state(page, "a.announced")
    assert any(s.startswith("Epoch 1 done") for s in said) and any(s.startswith("Finished") for s in said)
    assert not any("steps/s" in s for s in said)

    # the plots as a table
    page.click("details.plot-table summary")
    rows = page.locator("#plot-table tbody tr")
    assert rows.count() == 5 + 3
    assert "accuracy" in rows.nth(7).inner_text()

    # the drawing pad from the keyboard: Space, arrows, Enter -> a prediction
    page.focus("#pad")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Space")
    for key in ["ArrowDown"] * 8:
        page.keyboard.press(key)
    page.keyboard.press("Space")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.getElementById('prediction').dataset.prediction !== undefined", timeout=wait_ms(30_000))
    page.keyboard.press("Escape")
    assert page.evaluate("window.pytrainApp.padEmpty()") is True
