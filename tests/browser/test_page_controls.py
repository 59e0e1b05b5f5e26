""""Continue" after a finished run trains on to the epoch typed (the run's total, one meaning), and a changed optimizer or
learning rate keeps the weights learnt so far."""
from __future__ import annotations

import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, open_app, open_ready, train_epochs, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def _digest(page):
    return page.evaluate("() => window.pytrainApp.client.call('digest')")


def test_continue_and_optimizer_change_keep_training_the_same_weights(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.select_option("#digits-count", "1000")     # 16 batches of 64
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, 1, 120_000, batch_size=64, lr=0.003)
    assert app_state(page, "a.step") == 16
    acc1 = app_state(page, "a.epochs")[-1]["metric"]

    # "Train until epoch" is the run's total: at 1 of 1, Continue says what to type; 2 trains one more epoch
    assert page.inner_text("#start") == "Continue" and page.is_disabled("#start")
    assert 'set "Train until epoch" to 2 or more' in page.inner_text("#start-hint")
    page.fill("#epochs", "2")
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.step === 32 && !window.pytrainApp.training", timeout=wait_ms(120_000))
    assert page.input_value("#epochs") == "2"

    # the optimizer can change after training, and the weights stay
    assert page.locator("#optimizer").is_enabled()
    before = _digest(page)
    page.select_option("#optimizer", "SGD")
    page.wait_for_function("() => window.pytrainApp.model.optimizer === 'SGD'", timeout=wait_ms(60_000))
    assert _digest(page) == before and app_state(page, "a.step") == 32
    assert "weights learnt so far are kept" in page.inner_text("#train-status")
    ev = page.evaluate("() => window.pytrainApp.client.call('evaluate')")
    assert ev["metric"] >= acc1 - 0.05          # the same trained model, not a fresh one (~10%)

    # a new learning rate too: training continues from step 32 with the new optimizer
    page.fill("#lr", "0.05")
    page.fill("#epochs", "3")
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.step === 48 && !window.pytrainApp.training", timeout=wait_ms(120_000))
    assert app_state(page, "a.epochs")[-1]["metric"] >= acc1 - 0.05
    assert page.evaluate("() => window.pytrainApp.client.call('status')")["lr"] == 0.05
    assert app_state(page, "a.errors") == []


def test_a_batch_larger_than_the_training_set_is_pointed_out(context, site_url):
    page, _ = open_ready(context, site_url)
    page.click("#tabbtn-table")
    rows = "".join("%d,%d,%s\n" % (i, (i * 7) % 11, "ab"[i % 2]) for i in range(35))
    page.set_input_files("#csv-file", files=[{"name": "small.csv", "mimeType": "text/csv", "buffer": ("u,v,label\n" + rows).encode()}])
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 3", timeout=wait_ms(30_000))
    page.select_option("#csv-label", "label")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    train = app_state(page, "a.data.train")
    assert page.input_value("#batch-size") == "64" and train < 64
    hint = page.locator("#batch-hint")
    assert hint.is_visible() and ("the %d training" % train) in hint.inner_text(), hint.inner_text()
    page.click("#batch-hint button")                 # take the suggested size
    assert int(page.input_value("#batch-size")) * 4 <= train and not hint.is_visible()
    page.fill("#batch-size", "500")
    assert hint.is_visible()
