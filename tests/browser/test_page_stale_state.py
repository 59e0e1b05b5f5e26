"""No stale state after a failed upload, a failed build, a model switch or a rebuild."""
from __future__ import annotations

import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, build_digits, open_app, open_ready, wait_ready
from test_tables_and_models import iris_csv

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def _draw(page):
    box = page.locator("#pad").bounding_box()
    x0, y0, w = box["x"], box["y"], box["width"]
    page.mouse.move(x0 + 0.3 * w, y0 + 0.25 * w)
    page.mouse.down()
    page.mouse.move(x0 + 0.7 * w, y0 + 0.25 * w, steps=10)
    page.mouse.move(x0 + 0.45 * w, y0 + 0.8 * w, steps=15)
    page.mouse.up()


def test_failed_upload_and_failed_build_leave_nothing_behind(context, site_url, tmp_path):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(iris_csv(tmp_path / "iris.csv")))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 5", timeout=wait_ms(30_000))
    assert "iris.csv" in page.inner_text("#csv-info") and page.locator("#csv-build").is_enabled()
    # a file that is no table: the old file's columns, name and Build button go away
    page.set_input_files("#csv-file", files=[{"name": "empty.csv", "mimeType": "text/csv", "buffer": b"\n\n"}])
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    assert page.evaluate("document.getElementById('csv-label').options.length") == 0
    assert "iris.csv" not in page.inner_text("#csv-info")
    assert page.locator("#csv-build").is_disabled() and page.locator("#csv-label").is_disabled()

    # a build that fails: the status does not stay at "Reading the table…"
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,label\n1,,0\n3,4,1\n5,6,0\n7,8,1\n")
    page.set_input_files("#csv-file", str(bad))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 3", timeout=wait_ms(30_000))
    page.select_option("#csv-missing", "error")      # so that the build fails, in Python
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.errors.length >= 2", timeout=wait_ms(60_000))
    assert "missing value" in app_state(page, "a.errors")[-1]
    assert "…" not in page.inner_text("#setup-status")


def test_switching_models_clears_the_try_panel_and_keeps_drawn_digits(context, site_url):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.select_option("#digits-count", "1000")
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    _draw(page)
    page.wait_for_function("() => document.getElementById('prediction').dataset.prediction !== undefined", timeout=wait_ms(30_000))
    page.select_option("#add-label", "7")
    page.click("#add-sample")
    page.wait_for_function("() => window.pytrainApp.data.added === 1", timeout=wait_ms(30_000))
    _draw(page)
    page.wait_for_function("() => document.getElementById('prediction').dataset.prediction !== undefined", timeout=wait_ms(30_000))

    page.select_option("#digits-model", "cnn")
    page.click("#digits-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.kind === 'cnn' "
                           "&& !document.getElementById('digits-build').disabled", timeout=LOAD_TIMEOUT_MS)
    # the previous model's input and prediction are gone
    assert page.inner_text("#prediction") == "" and app_state(page, "a.lastPrediction") is None
    assert page.evaluate("window.pytrainApp.padEmpty()") is True
    # the drawn digit is still in the training set, and the text says so
    assert app_state(page, "a.data.added") == 1
    assert "1 drawn digit is still in the training set" in page.inner_text("#added-status")


def test_a_model_for_other_inputs_than_the_data_disables_start_and_says_why(context, site_url):
    models = pytest.importorskip("pytrain.generator.models")
    page, _ = open_ready(context, site_url)
    build_digits(page, "cnn")
    assert page.locator("#start").is_enabled()
    # a colour 3x16x16 model generated while the 1x28x28 digits are loaded
    page.click("#tabbtn-model")
    page.set_input_files("#onnx-file", files=[{"name": "colour.onnx", "mimeType": "application/octet-stream",
                                               "buffer": models.to_bytes(models.cnn(input_shape=(3, 16, 16), num_classes=10))}])
    page.wait_for_function("() => !document.getElementById('onnx-generate').disabled", timeout=wait_ms(30_000))
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'upload'", timeout=LOAD_TIMEOUT_MS)
    assert page.locator("#start").is_disabled()
    hint = page.locator("#start-hint")
    assert hint.is_visible() and "3×16×16" in hint.inner_text() and "784 values" in hint.inner_text(), hint.inner_text()
    assert "ok" not in page.get_attribute("#setup-status", "class")
    assert "3×16×16" in page.inner_text("#setup-status")


def test_a_new_model_clears_the_picture_prediction(context, site_url):
    np = pytest.importorskip("numpy")
    from test_tables_and_models import _png
    page, _ = open_ready(context, site_url)
    page.click("#tabbtn-examples")
    for k in (1, 2):
        files = [{"name": "c%d_%d.png" % (k, i), "mimeType": "image/png",
                  "buffer": _png(np.full((24, 24), 60 * k + 20 * i, np.uint8))} for i in range(2)]
        page.set_input_files("#ex-classes fieldset:nth-of-type(%d) input[type=file]" % k, files=files)
        page.wait_for_function("(k) => window.pytrainApp.examples[k - 1].items.length === 2", arg=k, timeout=wait_ms(30_000))
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'cnn'", timeout=LOAD_TIMEOUT_MS)
    page.set_input_files("#image-predict", files=[{"name": "grey.png", "mimeType": "image/png",
                                                   "buffer": _png(np.full((24, 24), 90, np.uint8))}])
    page.wait_for_function("() => document.getElementById('picture-prediction').textContent.includes('Prediction')",
                           timeout=wait_ms(30_000))
    page.evaluate("window.pytrainApp.model.old = true")
    page.click("#ex-build")                          # a new model: the old one's answer and file go
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready && !window.pytrainApp.model.old",
                           timeout=LOAD_TIMEOUT_MS)
    assert page.inner_text("#picture-prediction") == ""
    assert page.input_value("#image-predict") == "" and app_state(page, "a.lastPrediction") is None
