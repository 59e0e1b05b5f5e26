"""A diverging run is stopped and said to have diverged (never "Finished" in
green), the loss plot switches to a log scale, and the last good checkpoint can be restored."""
from __future__ import annotations

import pytest

import numpy as np

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, configure_training, open_app, shot, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def test_session_stops_an_exploding_run_and_goes_back():
    from pytrain.data.tabular import to_csv_text
    from pytrain.webapp import Session

    rs = np.random.RandomState(0)
    x = rs.randn(200, 4).astype(np.float32)
    s = Session()
    s.use_csv(to_csv_text(x, (x[:, 0] > 0).astype(int), label="y"), "y")
    s.build_mlp([8], optimizer="SGD")
    s.configure(batch_size=16, lr=0.05)
    s.train_for(budget_ms=1e9)                      # one good epoch
    good = s.last_good()
    assert good["epoch"] == 1 and good["step"] == s.run.at.step
    digest = s.digest()
    s.configure(lr=1e4)
    for _ in range(5):
        r = s.train_for(budget_ms=1e9)
        if r["diverged"]:
            break
    d = r["diverged"]
    assert d, "lr 1e4 did not diverge"
    assert "diverged" in d["message"] and "epoch 1, step %d" % good["step"] in d["message"]
    assert d["good"] == good and d["step"] == s.run.at.step + 1
    res = s.restore_good()
    assert res["step"] == good["step"] and res["digest"] == digest
    assert s.run.lr == 1e4                       # the rate the user set stays; they lower it next
    s.configure(lr=0.05)
    r = s.train_for(budget_ms=1e9)
    assert all(np.isfinite(r["losses"]))


def test_page_reports_divergence_and_restores_the_last_good_checkpoint(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.select_option("#digits-count", "1000")
    page.select_option("#optimizer", "SGD")
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready "
                           "&& window.pytrainApp.model.optimizer === 'SGD'", timeout=LOAD_TIMEOUT_MS)
    configure_training(page, 3, batch_size=64, lr=1000)
    page.click("#start")
    # the run's outcome is the "done" event's status line (a "state" event may say training stopped before it)
    page.wait_for_function("() => window.pytrainApp.step > 0 && !window.pytrainApp.training && "
                           "/Diverged|Finished|Stopped/.test(document.getElementById('train-status').textContent)",
                           timeout=wait_ms(120_000))
    status = page.locator("#train-status")
    assert "Diverged" in status.inner_text() and "Finished" not in status.inner_text()
    assert "ok" not in (status.get_attribute("class") or "") and "bad" in status.get_attribute("class")
    assert page.locator("#diverged").is_visible()
    assert "diverged" in page.inner_text("#diverged-text")
    # the user is taken to the way out, and the plot shows the jump on a log scale
    assert page.evaluate("document.activeElement.id") == "restore-good"
    assert page.evaluate("window.pytrainApp.lossPlotLog()") is True
    assert app_state(page, "a.errors") == []          # an outcome, not an error banner
    page.set_viewport_size({"width": 1280, "height": 800})
    shot(page.locator("#train"), "diverged-1280")

    page.click("#restore-good")
    page.wait_for_function("() => document.getElementById('diverged').hidden", timeout=wait_ms(30_000))
    assert app_state(page, "a.step") == 0
    assert "last good checkpoint" in page.inner_text("#train-status")
    assert page.evaluate("document.activeElement.id") == "lr"
    # with a sane learning rate the same model now trains
    configure_training(page, 1, lr=0.05)
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.epochs.length >= 1 && !window.pytrainApp.training",
                           timeout=wait_ms(120_000))
    assert "Finished" in page.inner_text("#train-status")
    assert app_state(page, "a.epochs")[-1]["metric"] > 0.5
