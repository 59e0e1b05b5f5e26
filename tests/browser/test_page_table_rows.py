"""A table with a text column and missing values: Try takes the row as typed ("4.6, , red"), and
the downloaded .onnx takes the same raw row in onnxruntime (numbers with NaN for a missing value,
the text column as strings: pytrain.run.rows) and answers what the page's Try answered."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, app_state, open_app, open_ready, train_epochs, wait_ms
from test_page_csv import messy_csv

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit


def test_try_and_the_export_take_the_row_as_typed(context, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    page, rec = open_ready(context, site_url)
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(messy_csv(tmp_path / "messy.csv")))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 6", timeout=wait_ms(30_000))
    page.uncheck("#csv-columns input[value=id]")
    page.select_option("#csv-missing", "fill")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, 2, 120_000, batch_size=16, lr=0.01)

    assert "color (blue, green, red)" in page.inner_text("#row-columns")
    typed = {"4.6, , red": ([[4.6, np.nan]], [["red"]]), "8.5; 1.25; blue": ([[8.5, 1.25]], [["blue"]])}
    answers = {}
    for row in typed:
        page.fill("#row-input", row)
        page.click("#row-predict")
        page.wait_for_function("(r) => { const p = window.pytrainApp.lastPrediction; return p && p.input.join() === r; }",
                               arg=",".join(c.strip() for c in row.replace(";", ",").split(",")), timeout=wait_ms(30_000))
        assert "Prediction:" in page.inner_text("#row-result")
        answers[row] = app_state(page, "a.lastPrediction.outputs")

    with page.expect_download() as info:
        page.click("#download-model")
    path = tmp_path / "messy.onnx"
    info.value.save_as(str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert {(i.name, i.type) for i in sess.get_inputs()} == {("input", "tensor(float)"), ("text", "tensor(string)")}
    for row, (numbers, text) in typed.items():
        got = sess.run(None, {"input": np.array(numbers, np.float32), "text": np.array(text, dtype=object)})[0]
        np.testing.assert_allclose(got.reshape(-1), answers[row], rtol=1e-4, atol=1e-5)
    assert answers["4.6, , red"] != answers["8.5; 1.25; blue"]

    # a word in a number column: said, naming the column
    page.fill("#row-input", "big, 1, red")
    page.click("#row-predict")
    page.wait_for_selector("#error:not([hidden])")
    assert "Column 'size' takes a number" in page.inner_text("#error-text")
    assert not rec.console_errors, rec.console_errors


def test_the_widget_takes_the_row_as_typed_like_its_export(context, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    ctx, rec = context
    page = open_app(ctx, site_url, rec, "examples/widget.html")
    got = page.evaluate("""async (csv) => {
        const { createTrainer } = await import("../pytrain-widget.js");
        const t = createTrainer({ data: { csv, label: "y", missing: "fill" }, hidden: [8], epochs: 1, batchSize: 16 });
        await t.train();
        const out = await t.predict(["4.6", "", "red"]);
        return { outputs: out.outputs[0], model: Array.from(await t.exportModel()) };
    }""", "\n".join(";".join(c for i, c in enumerate(line.split(";")) if i not in (0, 4))   # no id, no name
                    for line in messy_csv(tmp_path / "messy.csv").read_text().splitlines()) + "\n")
    sess = ort.InferenceSession(bytes(got["model"]), providers=["CPUExecutionProvider"])
    onnx = sess.run(None, {"input": np.array([[4.6, np.nan]], np.float32), "text": np.array([["red"]], object)})[0]
    np.testing.assert_allclose(onnx.reshape(-1), got["outputs"], rtol=1e-4, atol=1e-5)
    assert not rec.console_errors, rec.console_errors
