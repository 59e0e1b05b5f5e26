"""Run files of "By example" with a pretrained backbone: the whole run downloads as one zip
(with backbone.onnx and the examples), the page says in one line under the downloads why
`pytrain train --resume` cannot continue it, and after a reload the zip goes back into the page (and
into the widget) at the same step, answering the same."""
from __future__ import annotations

import pytest

import io
import zipfile

import numpy as np

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, open_app, shot, train_epochs, wait_ready
from test_page_a11y import axe_violations
from test_page_by_example_backbone import PREDICT, SIDE, _backbone
from test_tables_and_models import _png

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

MEMBERS = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint", "pytrain-run.json",
           "backbone.onnx", "examples.npy", "labels.npy", "features.npy"}


def test_backbone_run_file_goes_back_into_the_page_and_the_widget(context, site_url, tmp_path):
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.click("#tabbtn-examples")
    page.set_input_files("#ex-backbone", files=_backbone(tmp_path))
    page.wait_for_function("() => window.pytrainApp.backbone && window.pytrainApp.backbone.info", timeout=wait_ms(60_000))
    for k, base in ((1, 30), (2, 200)):   # dark and bright pictures, from files
        files = [{"name": "c%d-%d.png" % (k, i), "mimeType": "image/png",
                  "buffer": _png(np.full((40, 40), base + 5 * i, np.uint8))} for i in range(6)]
        page.set_input_files("#ex-classes fieldset:nth-of-type(%d) input[type=file]" % k, files=files)
        page.wait_for_function("() => window.pytrainApp.examples[%d].items.length === 6" % (k - 1), timeout=wait_ms(30_000))
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone'",
                           timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, 2, 180_000, batch_size=4, lr=0.01)
    step = app_state(page, "a.step")
    x = np.random.RandomState(0).rand(3, 3, SIDE, SIDE).astype(np.float32).reshape(-1).tolist()
    before = page.evaluate(PREDICT, x)["outputs"]

    assert page.locator("#run-file-note").count() == 0 or not page.is_visible("#run-file-note")
    with page.expect_download() as dl:
        page.click("#download-run")
    run = tmp_path / "run.zip"
    dl.value.save_as(str(run))
    assert set(zipfile.ZipFile(run).namelist()) == MEMBERS
    note = page.locator("#run-file-note")
    note.wait_for(state="visible", timeout=wait_ms(30_000))
    text = note.inner_text()
    assert "this page or the widget" in text and "pytrain train --resume" in text and "backbone" in text, text
    assert note.get_attribute("aria-live") is None and note.get_attribute("role") is None   # not announced
    assert page.get_attribute("#download-run", "aria-describedby") == "run-file-note"
    assert not app_state(page, "a.errors") and axe_violations(page) == []
    note.scroll_into_view_if_needed()
    shot(page, "run-file-note")

    # reload, and take the zip back instead of the run saved in this browser
    page.reload()
    wait_ready(page)
    page.click("button[data-tab=model]")
    page.set_input_files("#artifact-files", str(run))
    page.click("#artifacts-use")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone'",
                           timeout=wait_ms(60_000))
    assert app_state(page, "a.step") == step and app_state(page, "a.data.kind") == "arrays"
    assert "backbone.onnx: backbone" in page.inner_text("#train-status")
    np.testing.assert_allclose(page.evaluate(PREDICT, x)["outputs"], before, rtol=0, atol=1e-6)

    # the widget takes the same zip back (run: bytes)
    res = page.evaluate("""async ([bytes, x]) => {
        const { createTrainer } = await import('./pytrain-widget.js');
        const t = createTrainer({ run: new Uint8Array(bytes) });
        await t.ready;
        const res = await t.client.call('predict', {x: new Float32Array(x), shape: [3, 3, %d, %d]});
        const out = { step: t.model.step, origin: t.model.origin, outputs: res.outputs };
        t.destroy();
        return out;
    }""" % (SIDE, SIDE), [list(run.read_bytes()), x])
    assert res["step"] == step and res["origin"] == "backbone"
    np.testing.assert_allclose(res["outputs"], before, rtol=0, atol=1e-6)
    assert not app_state(page, "a.errors") and rec.foreign(site_url) == []
