"""Teach it by example: classes named on the page, examples recorded from the camera
(Chromium's fake camera) and added from files, a small CNN trained in the tab (Train brought into view), live predictions
from the camera, and the exported model answering like the page in onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import (wait_ms, LOAD_TIMEOUT_MS, Recorder, app_state, lent_or_fresh_context, open_app, train_epochs,
                             wait_ready)
from test_page_a11y import axe_violations, shoot
from test_tables_and_models import _png


#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


@pytest.fixture()
def camera_page(request, camera_browser, site_url):
    """(page, recorder): the app on its "By example" tab in a Chromium with a fake camera, allowed (in a
    ``second_visit`` module the camera browser's shared context, else a fresh one)."""
    rec = Recorder()
    with lent_or_fresh_context(request, camera_browser, rec, warm="warm_camera_context") as ctx:
        ctx.grant_permissions(["camera"])
        page = open_app(ctx, site_url, rec)
        wait_ready(page)
        page.click("#tabbtn-examples")
        yield page, rec


def _hold_until(page, selector, condition):
    """Hold the mouse down on ``selector`` (the record button) until ``condition`` holds in the page."""
    box = page.locator(selector).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.wait_for_function("() => %s" % condition, timeout=wait_ms(30_000))
    page.mouse.up()


def test_record_train_predict_and_export(camera_page, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    page, rec = camera_page
    assert page.locator("#ex-build").is_disabled()
    page.fill("#ex-classes fieldset:nth-of-type(2) legend input", "Blank")
    page.dispatch_event("#ex-classes fieldset:nth-of-type(2) legend input", "change")
    # class 1 from the camera: hold the record button until it has taken 5 frames
    _hold_until(page, "#ex-classes fieldset:nth-of-type(1) .ex-record", "window.pytrainApp.examples[0].items.length >= 5")
    n1 = page.evaluate("window.pytrainApp.examples[0].items.length")
    assert n1 >= 5, n1
    # class 2 from files: flat grey pictures
    files = [{"name": "g%d.png" % i, "mimeType": "image/png",
              "buffer": _png(np.full((24, 24), 40 + 10 * i, np.uint8))} for i in range(8)]
    page.set_input_files("#ex-classes fieldset:nth-of-type(2) input[type=file]", files=files)
    page.wait_for_function("() => window.pytrainApp.examples[1].items.length === 8", timeout=wait_ms(30_000))
    # the gallery shows them, and one can be deleted
    assert page.locator("#ex-classes fieldset:nth-of-type(2) .ex-item").count() == 8
    page.click("#ex-classes fieldset:nth-of-type(2) .ex-item button >> nth=0")
    assert page.evaluate("window.pytrainApp.examples[1].items.length") == 7
    assert "7 examples" in page.inner_text("#ex-classes fieldset:nth-of-type(2) .ex-count")
    assert axe_violations(page) == []
    shoot(page, "by-example")

    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'cnn'", timeout=LOAD_TIMEOUT_MS)
    # the tab is long: the built model brings Train into view, Start focused (the next step)
    page.wait_for_function("() => document.activeElement.id === 'start'", timeout=wait_ms(10_000))
    box = page.locator("#start").bounding_box()
    assert 0 <= box["y"] and box["y"] + box["height"] <= 800, box
    data = app_state(page, "a.data")
    assert data["classes"] == ["Class 1", "Blank"] and data["sample_shape"] == [3, 32, 32]
    assert data["train"] + data["val"] == n1 + 7
    epochs = train_epochs(page, 5, 180_000, batch_size=4, lr=0.003)
    assert all(np.isfinite(e["loss"]) for e in epochs)

    # live prediction from the camera in the Try panel
    assert page.locator("#try-image").is_visible()
    page.click("#cam-predict")
    page.wait_for_function("() => document.getElementById('picture-prediction').textContent.includes('Prediction')",
                           timeout=wait_ms(30_000))
    label = app_state(page, "a.lastPrediction.label")
    assert label in ("Class 1", "Blank")
    page.click("#cam-predict")     # stop

    # the exported model (the whole CNN) answers like the page
    with page.expect_download() as info:
        page.click("#download-model")
    path = tmp_path / "by_example.onnx"
    info.value.save_as(str(path))
    x = np.array(page.evaluate("Array.from(window.pytrainApp.examples[0].items[0])"), np.float32).reshape(1, 3, 32, 32)
    res = page.evaluate("(x) => window.pytrainApp.client.call('predict', {x: new Float32Array(x), shape: [1, 3, 32, 32]})",
                        x.reshape(-1).tolist())
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(out, np.array(res["outputs"], np.float32), rtol=1e-4, atol=1e-4)
    assert app_state(page, "a.errors") == []
    assert rec.foreign(site_url) == []
