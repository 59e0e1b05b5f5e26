"""Regression targets are learnt scaled and answered in their own units by the
exported model; an uploaded model trained on a table gets feature standardisation, baked into its
export (wine.csv: proline as a regression target, class with an uploaded MLP)."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, open_app, open_ready, train_epochs, wait_ready
from test_page_task_guess import wine_csv, wine_table

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def _wine_rows(path, label):
    import csv
    rows = list(csv.reader(path.read_text().splitlines()))
    head, body = rows[0], rows[1:]
    j = head.index(label)
    x = np.array([[float(v) for i, v in enumerate(r) if i != j] for r in body], dtype=np.float32)
    y = np.array([float(r[j]) for r in body])
    return x, y


def test_proline_regression_beats_the_mean_and_exports_in_its_units(context, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    page, _ = open_ready(context, site_url)
    csv_path = wine_table(page, tmp_path)
    page.select_option("#csv-label", "proline")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    assert "targets scaled" in page.inner_text("#setup-status")
    epochs = train_epochs(page, 30, 240_000, batch_size=16, lr=0.002)
    rmse = epochs[-1]["metric"]
    x, y = _wine_rows(csv_path, "proline")
    assert rmse < 0.7 * np.std(y), (rmse, np.std(y))      # clearly better than predicting the mean

    with page.expect_download() as info:
        page.click("#download-model")
    path = tmp_path / "proline.onnx"
    info.value.save_as(str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    pred = sess.run(None, {sess.get_inputs()[0].name: x})[0].reshape(-1)
    assert abs(pred.mean() - y.mean()) < 0.3 * y.std()   # raw units, not standard ones
    assert np.sqrt(np.mean((pred - y) ** 2)) < 0.7 * np.std(y)


def test_uploaded_model_gets_standardised_features_baked_into_its_export(context, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    models = pytest.importorskip("pytrain.generator.models")
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    csv_path = wine_csv(tmp_path / "wine.csv")
    page.click("button[data-tab=model]")
    page.set_input_files("#onnx-file", files=[{"name": "wine_mlp.onnx", "mimeType": "application/octet-stream",
                                               "buffer": models.to_bytes(models.mlp(input_size=13, hidden_sizes=[32],
                                                                                    output_size=3, seed=0))}])
    page.wait_for_function("() => !document.getElementById('onnx-generate').disabled", timeout=wait_ms(30_000))
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'upload'", timeout=wait_ms(60_000))
    page.set_input_files("#data-csv-file", str(csv_path))
    page.wait_for_function("() => document.getElementById('data-csv-label').options.length === 14", timeout=wait_ms(30_000))
    assert page.input_value("#data-csv-label") == "class"
    assert page.locator("#data-standardize").is_checked()
    page.click("#data-csv-load")
    page.wait_for_function("() => window.pytrainApp.model.scaling && window.pytrainApp.model.scaling.x_mean", timeout=wait_ms(30_000))
    assert "features standardised" in page.inner_text("#setup-status")
    epochs = train_epochs(page, 30, 240_000, batch_size=16, lr=0.002)
    assert epochs[-1]["metric"] >= 0.9, epochs[-1]

    with page.expect_download() as info:
        page.click("#download-model")
    path = tmp_path / "wine.onnx"
    info.value.save_as(str(path))
    x, y = _wine_rows(csv_path, "class")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    assert np.mean(np.argmax(logits, axis=1) == y) >= 0.9      # raw rows in, standardised inside
