"""An error shows where the action was (in view, focused), also on a phone."""
from __future__ import annotations

from browser_helpers import wait_ms, open_app, shot, wait_ready


def _in_view(page, selector):
    return page.evaluate("""(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
        return r.top >= -1 && r.bottom <= window.innerHeight + 1 && r.height > 0; }""", selector)


def test_error_shows_next_to_the_action_and_takes_focus_on_a_phone(browser, site_url, tmp_path):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    ctx.set_default_timeout(wait_ms(30_000))
    try:
        page = ctx.new_page()
        page.goto(site_url)
        wait_ready(page)
        page.click("button[data-tab=model]")
        bad = tmp_path / "bad.csv"
        bad.write_text("a,b,label\n1,2,0\n3,hello,1\n5,6,0\n7,8,1\n")
        page.set_input_files("#data-csv-file", str(bad))
        page.wait_for_function("() => document.getElementById('data-csv-label').options.length === 3", timeout=wait_ms(30_000))
        page.click("#data-csv-load")
        page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
        assert "hello" in page.inner_text("#error-text")
        # in the Training data fieldset, on screen, focused
        assert page.evaluate("document.getElementById('error').closest('fieldset') === "
                             "document.getElementById('data-csv-load').closest('fieldset')")
        assert _in_view(page, "#error")
        assert page.evaluate("document.activeElement.id") == "error"
        shot(page, "error-390")
        page.click("#error-close")
        assert page.evaluate("document.activeElement.id") == "data-csv-load"

        # a bad learning rate: the error moves to the Train card
        page.click("button[data-tab=digits]")
        page.select_option("#digits-count", "1000")
        page.click("#digits-build")
        page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=wait_ms(120_000))
        page.fill("#lr", "-1")
        page.click("#start")
        page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
        assert "learning rate" in page.inner_text("#error-text")
        assert page.evaluate("document.getElementById('error').closest('.card').id") == "train"
        assert _in_view(page, "#error") and page.evaluate("document.activeElement.id") == "error"
    finally:
        ctx.close()
