"""Reloading mid-training offers to resume, and the run continues from the saved step with the
saved parameters (IndexedDB holds artifacts, checkpoint, data choice and progress)."""
from __future__ import annotations

import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, configure_training, open_app, stop_training, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def test_reload_mid_training_resumes_where_it_was(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    assert page.locator("#resume-banner").is_hidden()
    page.select_option("#digits-count", "1000")      # 16 batches of 64 per epoch
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    configure_training(page, 6, batch_size=64, lr=0.003)
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.saved && window.pytrainApp.saved.epoch >= 1", timeout=wait_ms(120_000))
    assert app_state(page, "a.training") is True      # still running: this reload interrupts it

    page.reload()
    banner = page.locator("#resume-banner")
    banner.wait_for(state="visible", timeout=wait_ms(30_000))
    saved_step = int(banner.get_attribute("data-step"))
    saved_digest = banner.get_attribute("data-digest")
    assert saved_step >= 16, saved_step   # after the first epoch (or a save within a later one)
    assert "Resume" in page.inner_text("#resume-banner")

    wait_ready(page)
    page.click("#resume-btn")
    page.wait_for_function("() => window.pytrainApp.resumed !== null", timeout=wait_ms(60_000))
    resumed = app_state(page, "a.resumed")
    assert resumed["step"] == saved_step
    assert resumed["savedStep"] == saved_step
    assert resumed["digest"] == saved_digest == resumed["savedDigest"]
    assert resumed["train"]["epochs"] == 6 and resumed["train"]["batchSize"] == 64
    assert page.input_value("#epochs") == "6"
    # The plots show the history from before the reload.
    assert len(app_state(page, "a.lossPoints()")) >= saved_step

    # Training carries on by itself from the next step.
    page.wait_for_function("() => window.pytrainApp.step > %d" % saved_step, timeout=wait_ms(60_000))
    first_new = page.evaluate("window.pytrainApp.lossPoints().filter(p => p[0] > %d)[0][0]" % saved_step)
    assert first_new == saved_step + 1
    stop_training(page)
    assert app_state(page, "a.errors") == []
