"""The CSV flow (iris uploaded as a file) and the "your model" flow, including bad uploads."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from browser_helpers import (wait_ms, LOAD_TIMEOUT_MS, app_state, configure_training, open_app, train_epochs, wait_ready)

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def iris_csv(path: Path) -> Path:
    datasets = pytest.importorskip("sklearn.datasets")
    iris = datasets.load_iris()
    lines = [",".join(FEATURES + ["species"])]
    for row, target in zip(iris.data, iris.target):
        lines.append(",".join("%g" % v for v in row) + "," + iris.target_names[target])
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def page_ctx(context, site_url):
    ctx, rec = context
    return open_app(ctx, site_url, rec), rec


def test_iris_csv_trains_to_90_percent(page_ctx, tmp_path, site_url):
    page, rec = page_ctx
    csv = iris_csv(tmp_path / "iris.csv")
    wait_ready(page)
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(csv))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 5", timeout=wait_ms(30_000))
    assert page.input_value("#csv-label") == "species"
    page.fill("#csv-hidden", "16")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    data = app_state(page, "a.data")
    assert (data["train"], data["val"], data["num_classes"]) == (120, 30, 3)
    assert data["classes"] == ["setosa", "versicolor", "virginica"]
    configure_training(page, 40, batch_size=16, lr=0.01)
    page.click("#start")
    # Pause and resume once on the way: pausing saves a checkpoint and training picks up from there.
    page.wait_for_function("() => window.pytrainApp.step >= 40", timeout=wait_ms(60_000))
    page.click("#pause")
    page.wait_for_function("() => window.pytrainApp.paused && window.pytrainApp.saved && window.pytrainApp.saved.reason === 'paused'",
                           timeout=wait_ms(30_000))
    paused_at = app_state(page, "a.saved.step")
    assert app_state(page, "a.step") == paused_at and "Paused" in page.inner_text("#train-status")
    page.click("#resume-train")
    page.wait_for_function("() => window.pytrainApp.step > %d" % paused_at, timeout=wait_ms(30_000))
    page.wait_for_function("() => window.pytrainApp.epochs.length >= 40 && !window.pytrainApp.training", timeout=wait_ms(240_000))
    last = app_state(page, "a.epochs")[-1]
    assert last["metricName"] == "accuracy" and last["metric"] >= 0.9, last

    # A typed row goes through the model (with the standardisation baked into it).
    page.fill("#row-input", "5.1, 3.5, 1.4, 0.2")
    page.click("#row-predict")
    page.wait_for_function("() => document.getElementById('row-result').textContent.includes('Prediction')", timeout=wait_ms(30_000))
    assert "setosa" in page.inner_text("#row-result")
    assert rec.foreign(site_url) == []


def test_bad_uploads_show_errors_and_the_page_keeps_working(page_ctx, tmp_path):
    page, _ = page_ctx
    models = pytest.importorskip("pytrain.generator.models")
    wait_ready(page)
    page.click("button[data-tab=model]")

    # 1. Not an ONNX file at all.
    page.set_input_files("#onnx-file", files=[{"name": "broken.onnx", "mimeType": "application/octet-stream",
                                               "buffer": b"this is not a protobuf \x07\x07\x07"}])
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    message = page.inner_text("#error-text")
    assert "broken.onnx" in message and "not a valid ONNX" in message, message
    assert page.locator("#onnx-generate").is_disabled()
    page.click("#error-close")

    # 2. A CSV whose feature column is not numeric.
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("a,b,label\n1,2,0\n3,hello,1\n5,6,0\n7,8,1\n")
    page.set_input_files("#data-csv-file", str(bad_csv))
    page.wait_for_function("() => document.getElementById('data-csv-label').options.length === 3", timeout=wait_ms(30_000))
    page.click("#data-csv-load")
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    message = page.inner_text("#error-text")
    assert "hello" in message and "not a number" in message, message
    page.click("#error-close")

    # 3. The page still works: a real inference model + the iris table train in this same tab.
    model = models.mlp(input_size=4, hidden_sizes=[8], output_size=3, seed=1)
    onnx_path = tmp_path / "iris_mlp.onnx"
    onnx_path.write_bytes(models.to_bytes(model))
    page.set_input_files("#onnx-file", str(onnx_path))
    page.wait_for_function("() => document.querySelectorAll('#onnx-params input').length === 4", timeout=wait_ms(30_000))
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'upload'", timeout=wait_ms(60_000))
    page.set_input_files("#data-csv-file", str(iris_csv(tmp_path / "iris.csv")))
    page.wait_for_function("() => document.getElementById('data-csv-label').options.length === 5", timeout=wait_ms(30_000))
    page.click("#data-csv-load")
    page.wait_for_function("() => window.pytrainApp.data && window.pytrainApp.data.kind === 'csv'", timeout=wait_ms(30_000))
    epochs = train_epochs(page, 2, 120_000, batch_size=16)
    assert all(np.isfinite(e["loss"]) for e in epochs)
    assert page.locator("#error").is_hidden()


def _png(gray: np.ndarray) -> bytes:
    """A grayscale PNG from uint8 pixels, with the stdlib only."""
    import struct
    import zlib

    h, w = gray.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + gray[y].astype(np.uint8).tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_uploaded_cnn_trains_on_labelled_images(page_ctx, site_url):
    """An inference CNN from a file, artifacts generated in the page, images labelled by file name."""
    page, rec = page_ctx
    models = pytest.importorskip("pytrain.generator.models")
    import build
    from pytrain.webapp import read_mnist

    images, labels = read_mnist((build.SITE / "data" / "mnist-10k.bin").read_bytes())
    files = []
    for digit in (0, 1, 7):
        for i, idx in enumerate(np.nonzero(labels == digit)[0][:12]):
            files.append({"name": "%d_%02d.png" % (digit, i), "mimeType": "image/png", "buffer": _png(images[idx])})
    model = models.cnn(input_shape=(1, 28, 28), num_classes=3, seed=0)
    wait_ready(page)
    page.click("button[data-tab=model]")
    page.set_input_files("#onnx-file", files=[{"name": "cnn.onnx", "mimeType": "application/octet-stream",
                                               "buffer": models.to_bytes(model)}])
    page.wait_for_function("() => document.querySelectorAll('#onnx-params input').length > 0", timeout=wait_ms(30_000))
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'upload'", timeout=wait_ms(60_000))
    page.set_input_files("#data-images", files=files)
    page.click("#data-images-load")
    page.wait_for_function("() => window.pytrainApp.data && window.pytrainApp.data.kind === 'arrays'", timeout=wait_ms(60_000))
    data = app_state(page, "a.data")
    assert data["train"] + data["val"] == 36
    assert data["classes"] == ["0", "1", "7"] and data["sample_shape"] == [1, 28, 28]
    epochs = train_epochs(page, 3, 180_000, batch_size=8, lr=0.003)
    assert all(np.isfinite(e["loss"]) for e in epochs)
    assert app_state(page, "a.errors") == []
    assert rec.foreign(site_url) == []
