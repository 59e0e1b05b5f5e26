"""A reload in the middle of an epoch resumes at the step last saved within it (a running run is
saved every few seconds, not only after each epoch), and the banner says what it offers."""
from __future__ import annotations

import pytest

from browser_helpers import wait_ms, app_state, build_digits, configure_training, open_ready, stop_training

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def test_reload_mid_epoch_resumes_at_the_saved_step(context, site_url):
    page, rec = open_ready(context, site_url)
    # 1,000 steps of 8 per epoch: epoch 0 lasts seconds on any machine, so a save within it is certain
    build_digits(page, "cnn", "8000")
    configure_training(page, 2, batch_size=8, lr=0.002)
    page.evaluate("window.pytrainApp.saveEveryMs = 400")   # the page saves every 10 s; sooner here
    page.click("#start")
    page.wait_for_function("() => { const s = window.pytrainApp.saved; return s && s.reason === 'progress' "
                           "&& s.epoch === 0; }", timeout=wait_ms(120_000))
    assert "during epoch 1" in page.inner_text("#saved-status")

    page.reload()
    banner = page.locator("#resume-banner")
    banner.wait_for(state="visible", timeout=wait_ms(30_000))
    saved_step = int(banner.get_attribute("data-step"))
    assert 0 < saved_step and "every 10 seconds of training" in page.inner_text("#resume-banner")
    page.wait_for_selector("body[data-ready]", state="attached", timeout=wait_ms(60_000))
    page.click("#resume-btn")
    page.wait_for_function("() => window.pytrainApp.resumed !== null", timeout=wait_ms(60_000))
    assert app_state(page, "a.resumed.step") == saved_step
    # it carries on by itself from the next step
    page.wait_for_function("() => window.pytrainApp.step > %d" % saved_step, timeout=wait_ms(60_000))
    first_new = page.evaluate("window.pytrainApp.lossPoints().filter(p => p[0] > %d)[0][0]" % saved_step)
    assert first_new == saved_step + 1
    stop_training(page)
    assert app_state(page, "a.errors") == [] and not rec.console_errors, rec.console_errors
