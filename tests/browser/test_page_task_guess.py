"""A numeric label with many distinct values is regression, and the page says
which task it chose and why (wine.csv, label "proline": 278-1680)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, open_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def wine_csv(path: Path) -> Path:
    datasets = pytest.importorskip("sklearn.datasets")
    wine = datasets.load_wine()
    names = [n.replace("/", "_") for n in wine.feature_names]
    lines = [",".join(names + ["class"])]
    for row, target in zip(wine.data, wine.target):
        lines.append(",".join("%g" % v for v in row) + ",%d" % target)
    path.write_text("\n".join(lines) + "\n")
    return path


def wine_table(page, tmp_path):
    """The started app ``page`` on its "Your table" tab with wine.csv read (14 columns offered as the label);
    returns the CSV's path."""
    csv_path = wine_csv(tmp_path / "wine.csv")
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(csv_path))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 14", timeout=wait_ms(30_000))
    return csv_path


def test_explain_task_rules():
    from pytrain.data.labels import explain_task
    assert explain_task(np.array([278.0, 1680, 520, 735] * 40))[0] == "regression"
    assert explain_task(np.arange(10.0).repeat(5))[0] == "classification"
    assert explain_task(np.arange(100).repeat(30))[0] == "classification"     # 100 dense class ids
    assert explain_task(np.array([1.5, 2.0]))[0] == "regression"
    assert explain_task(np.array(["a", "b"]))[0] == "classification"


def _build(page, label):
    page.select_option("#csv-label", label)
    page.click("#csv-build")
    page.wait_for_function("(l) => window.pytrainApp.model && window.pytrainApp.model.ready && window.pytrainApp.data"
                           " && window.pytrainApp.data.kind === 'csv' && !document.getElementById('csv-build').disabled",
                           arg=label, timeout=LOAD_TIMEOUT_MS)


def test_wine_proline_is_regression_and_the_page_says_why(context, site_url, tmp_path):
    page, _ = open_ready(context, site_url)
    wine_table(page, tmp_path)
    _build(page, "proline")
    data, model = app_state(page, "a.data"), app_state(page, "a.model")
    assert data["task"] == "regression" and model["loss"] == "MSELoss"
    assert model["params"] < 1000, model["params"]      # one output, not 1,681 classes
    status = page.inner_text("#setup-status")
    assert "Task: regression, because the labels are" in status and "whole numbers from 278 to 1680" in status, status

    _build(page, "class")
    data = app_state(page, "a.data")
    assert data["task"] == "classification" and data["num_classes"] == 3
    assert "Task: classification, because the labels are 3 distinct whole numbers" in page.inner_text("#setup-status")
