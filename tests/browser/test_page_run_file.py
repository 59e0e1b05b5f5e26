"""Artifacts are recognised by content (a checkpoint named pytrain-step250.ckpt
is a checkpoint), and one download of the whole run goes back into the page, the widget and
`pytrain train --resume`."""
from __future__ import annotations

import pytest

import io
import subprocess
import sys
import zipfile

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, train_epochs, wait_ready
from test_tables_and_models import iris_csv

#: the app starts once for the module (``started_app``), as a second visit: the second test needs only a started app
#: (a file that is no artifact refused, naming it: the last error, whatever the first test left)
pytestmark = pytest.mark.second_visit

RUN_MEMBERS = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint", "pytrain-run.json", "data.csv"}


def _train_iris(page, tmp_path, epochs):
    page.click("button[data-tab=table]")
    page.set_input_files("#csv-file", str(iris_csv(tmp_path / "iris.csv")))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 5", timeout=wait_ms(30_000))
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, epochs, 120_000, batch_size=16, lr=0.01)


def _digest(page):
    return page.evaluate("() => window.pytrainApp.client.call('digest')")


def test_run_file_goes_back_into_the_page_the_widget_and_the_cli(started_app, browser, site_url, tmp_path):
    page, _ = started_app
    _train_iris(page, tmp_path, 2)
    step, digest = app_state(page, "a.step"), _digest(page)
    losses = app_state(page, "a.lossPoints()")
    epochs = [{k: v for k, v in e.items() if v is not None} for e in app_state(page, "a.epochs")]   # as JSON keeps them
    assert step == 16     # 120 rows, batches of 16, 2 epochs
    with page.expect_download() as info:
        page.click("#download-run")
    assert info.value.suggested_filename == "pytrain-run-step16.zip"
    run = tmp_path / "run.zip"
    info.value.save_as(str(run))
    members = zipfile.ZipFile(run).namelist()
    assert set(members) == RUN_MEMBERS

    # The CLI: unzipped, it is an artifact directory that --resume continues at epoch 3.
    run_dir = tmp_path / "run"
    zipfile.ZipFile(run).extractall(run_dir)
    cli = subprocess.run([sys.executable, "-m", "pytrain", "train", str(run_dir), "--data", str(run_dir / "data.csv"),
                          "--label", "species", "--resume", "--epochs", "3"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert "epoch 3/3" in cli.stdout and "step 24" in cli.stdout, cli.stdout

    # Another browser (a fresh context: no IndexedDB) takes the zip back, table included.
    other = browser.new_context()
    other.set_default_timeout(wait_ms(30_000))
    try:
        page2 = other.new_page()
        page2.goto(site_url)
        wait_ready(page2)
        page2.click("button[data-tab=model]")
        page2.set_input_files("#artifact-files", str(run))
        page2.click("#artifacts-use")
        page2.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=wait_ms(60_000))
        assert app_state(page2, "a.step") == step and _digest(page2) == digest
        data = app_state(page2, "a.data")
        assert data["kind"] == "csv" and data["train"] + data["val"] == 150
        assert "Taken back at epoch 2, step 16" in page2.inner_text("#train-status")
        assert page2.input_value("#batch-size") == "16"
        # the plots show the run's history, and its settings come back: "Train until epoch" is its 2, reached
        assert app_state(page2, "a.epochs") == epochs and app_state(page2, "a.lossPoints()") == losses
        assert app_state(page2, "a.plots.metric.series[0].points.length") == 2
        assert page2.input_value("#epochs") == "2" and page2.is_disabled("#start")
        assert page2.inner_text("#start-hint") == 'The run has trained 2 epochs: set "Train until epoch" to 3 or more to train on.'
        page2.fill("#epochs", "3")
        page2.click("#start")     # continues: one more epoch of 8 batches
        page2.wait_for_function("() => window.pytrainApp.epochs.length === 3 && !window.pytrainApp.training",
                                timeout=wait_ms(120_000))
        assert app_state(page2, "a.step") == 24 and app_state(page2, "a.errors") == []

        # Loose files with any names: the checkpoint named like the page's old download is recognised.
        z = zipfile.ZipFile(run)
        loose = [{"name": n, "mimeType": "application/octet-stream", "buffer": z.read(m)} for n, m in
                 [("mlp-train.onnx", "optimizer_model.onnx"), ("a.onnx", "training_model.onnx"),
                  ("b.onnx", "eval_model.onnx"), ("pytrain-step250.ckpt", "checkpoint")]]
        page2.set_input_files("#artifact-files", files=loose)
        page2.click("#artifacts-use")
        page2.wait_for_function("() => document.getElementById('train-status').textContent.includes('Recognised')",
                                timeout=wait_ms(60_000))
        assert app_state(page2, "a.errors") == []
        assert app_state(page2, "a.step") == step and _digest(page2) == digest
        status = page2.inner_text("#train-status")
        assert "pytrain-step250.ckpt: checkpoint" in status and "mlp-train.onnx: optimizer" in status, status

        # The widget takes the same zip back (run: bytes).
        res = page2.evaluate("""async (bytes) => {
            const { createTrainer } = await import('./pytrain-widget.js');
            const t = createTrainer({ run: new Uint8Array(bytes) });
            await t.ready;
            const out = { step: t.model.step, kind: t.data.kind, digest: await t.client.call('digest') };
            t.destroy();
            return out;
        }""", list(run.read_bytes()))
        assert res == {"step": step, "kind": "csv", "digest": digest}
    finally:
        other.close()


def test_not_an_artifact_is_named_with_what_it_is(started_app):
    page, _ = started_app
    page.click("button[data-tab=model]")
    page.set_input_files("#artifact-files", files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello"}])
    page.click("#artifacts-use")
    page.wait_for_function("() => window.pytrainApp.errors.length > 0", timeout=wait_ms(60_000))
    msg = app_state(page, "a.errors")[-1]
    assert "notes.txt" in msg and "neither an ONNX model nor a pytrain checkpoint" in msg, msg
