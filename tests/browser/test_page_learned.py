"""What it learned: after a run the page shows the validation confusion matrix and
per-class accuracy (or predicted against true values for a regression), and the model's
parameters with their sizes and whether they train."""
from __future__ import annotations

import pytest

import numpy as np

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, train_epochs
from test_page_a11y import axe_violations, shoot
from test_page_task_guess import wine_table

#: the app starts once for the module (``started_app``), as a second visit: the first test asserts the panel empty
#: before any run, which the app's start gives it; the second builds its own model and needs nothing else of the page
pytestmark = pytest.mark.second_visit


def test_confusion_matrix_and_parameters_after_a_digits_run(started_app):
    page, _ = started_app
    assert page.locator("#learned-none").is_visible()
    page.select_option("#digits-count", "1000")
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    epochs = train_epochs(page, 2, 120_000, batch_size=64, lr=0.003)
    page.wait_for_function("() => window.pytrainApp.learned", timeout=wait_ms(60_000))
    r = app_state(page, "a.learned")
    m = np.array(r["confusion"])
    assert m.shape == (10, 10) and m.sum() == 1000
    assert abs(np.trace(m) / 1000 - epochs[-1]["metric"]) < 1e-9          # the page's own accuracy
    assert r["per_class"][3] == m[3, 3] / m[3].sum()
    assert page.locator("#confusion tbody tr").count() == 10
    assert "Validation accuracy" in page.inner_text("#learned-summary")
    trained = sum(l["size"] for l in r["layers"] if l["trains"])
    assert trained == app_state(page, "a.model.params")
    assert "constant learning rate" in page.inner_text("#layers-summary")
    assert axe_violations(page) == []
    shoot(page, "learned")
    # a new model: the panel no longer shows the previous one's results
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.learned === null", timeout=LOAD_TIMEOUT_MS)
    assert page.locator("#learned-none").is_visible()


def test_predicted_against_true_for_a_regression(started_app, tmp_path):
    page, _ = started_app
    wine_table(page, tmp_path)
    page.select_option("#csv-label", "proline")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    # what is checked (the pairs, their RMSE as the last epoch's, the scatter, the summary's baseline) holds
    # after any number of epochs: 2, not the 20 a good fit would need
    epochs = train_epochs(page, 2, 240_000, batch_size=16, lr=0.002)
    page.wait_for_function("() => window.pytrainApp.learned", timeout=wait_ms(60_000))
    r = app_state(page, "a.learned")
    pairs = np.array(r["pairs"])
    assert len(pairs) == r["n"] and np.all(pairs[:, 0] >= 278) and np.all(pairs[:, 0] <= 1680)
    assert abs(np.sqrt(np.mean((pairs[:, 1] - pairs[:, 0]) ** 2)) - epochs[-1]["metric"]) < 1e-3 * epochs[-1]["metric"]
    assert page.locator("#scatter").is_visible() and page.locator("#learned-classes").is_hidden()
    assert "always predicting the mean" in page.inner_text("#learned-summary")
    assert axe_violations(page) == []
