"""A first digits run, as someone who has never trained a model meets it: nothing to try before a
model (but the digits pad on the digits tab), step ticks that are whole steps, a status in sentences,
"This is a" starting at the digit the model said, and on a phone a confusion matrix whose labels
stay inside their cells."""
from __future__ import annotations

import pytest

from browser_helpers import app_state, build_digits, open_ready, shot, train_epochs, wait_ms
from test_page_stale_state import _draw

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

OVERFLOWING = """() => Array.from(document.querySelectorAll('#confusion th, #confusion td'))
    .filter((c) => c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1)
    .map((c) => c.textContent)"""


def test_a_first_digits_run_reads_right(context, site_url):
    page, rec = open_ready(context, site_url)
    # before any model: the digits tab offers its pad, the other tabs nothing to try yet
    assert page.locator("#pad").is_visible()
    assert not page.locator("#try-empty").is_visible()
    for tab in ("table", "model", "examples"):
        page.click("#tabbtn-%s" % tab)
        assert page.locator("#try-empty").is_visible() and not page.locator("#pad").is_visible(), tab
    page.click("#tabbtn-digits")
    assert page.locator("#pad").is_visible()

    build_digits(page)
    train_epochs(page, 1, 120_000, batch_size=500, lr=0.003)     # 2 steps: the step axis spans 1 to 2
    # the plot redraws at most every few frames: wait for its drawing of the steps
    page.wait_for_function("() => (window.pytrainApp.plots.loss.lastXTicks || []).length > 0", timeout=wait_ms(30_000))
    ticks = page.evaluate("window.pytrainApp.plots.loss.lastXTicks")
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    status = page.inner_text("#train-status")
    assert status.startswith("Finished at epoch 1, step 2. Validation accuracy "), status

    page.fill("#epochs", "3")
    train_epochs(page, 3, 120_000, batch_size=64)                # well enough trained to read a 7
    _draw(page)                                                  # a 7
    page.wait_for_selector("#prediction[data-prediction]", timeout=wait_ms(30_000))
    said = app_state(page, "a.lastPrediction.label")
    assert page.input_value("#add-label") == said

    page.wait_for_function("() => window.pytrainApp.learned", timeout=wait_ms(60_000))
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#learned-classes").scroll_into_view_if_needed()
    shot(page.locator("#learned"), "confusion-390")
    assert page.evaluate(OVERFLOWING) == []
    assert app_state(page, "a.errors") == [] and not rec.console_errors, rec.console_errors
