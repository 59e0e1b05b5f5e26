"""Run files of tables the page prepared: a run on a `;`-separated CSV with missing values
filled, columns left out, a text column one-hot encoded and a regression target scaled goes from the
page to `pytrain train --resume` and continues with the page's numbers; the CLI's export takes the
table's rows as typed, as the page's does, and answers in the target's units."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, open_app, train_epochs, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _table(n: int = 90) -> str:
    rng = np.random.RandomState(0)
    rows = ["id;a;b;color;c;target"]
    for i in range(n):
        a, b, c = rng.randn(), rng.randn() * 10 + 3, rng.rand()
        col = ("red", "green", "blue")[i % 3]
        t = 500 + 300 * a + 20 * b + {"red": 100, "green": -50, "blue": 0}[col] + rng.randn() * 5
        cells = ["row%d" % i, "%.4f" % a, "%.3f" % b, col, "%.5f" % c, "%.2f" % t]
        if i % 11 == 3:
            cells[1] = "NA"
        if i % 13 == 5:
            cells[2] = ""
        rows.append(";".join(cells))
    return "\n".join(rows) + "\n"


def test_prepared_table_run_resumes_in_the_cli(context, site_url, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.click("button[data-tab=table]")
    path = tmp_path / "table.csv"
    path.write_text(_table())
    page.set_input_files("#csv-file", str(path))
    page.wait_for_function("() => document.getElementById('csv-label').options.length === 6", timeout=wait_ms(30_000))
    assert page.input_value("#csv-label") == "target"
    assert page.is_disabled("#csv-columns input[value=id]")      # 90 different texts: left out
    page.uncheck("#csv-columns input[value=c]")                   # left out by the user
    page.select_option("#csv-missing", "fill")
    page.fill("#csv-hidden", "8")
    page.click("#csv-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.ready", timeout=LOAD_TIMEOUT_MS)
    assert app_state(page, "a.data.features") == ["a", "b", "color=blue", "color=green", "color=red"]
    train_epochs(page, 2, 120_000, batch_size=8, lr=0.01)
    step0 = app_state(page, "a.step")
    assert step0 == 18            # 72 training rows, batches of 8, 2 epochs
    with page.expect_download() as info:
        page.click("#download-run")
    run = tmp_path / "run.zip"
    info.value.save_as(str(run))
    run_dir = tmp_path / "run"
    zipfile.ZipFile(run).extractall(run_dir)

    log = tmp_path / "log.jsonl"
    cli = subprocess.run([sys.executable, "-m", "pytrain", "train", str(run_dir), "--data", str(run_dir / "data.csv"),
                          "--label", "target", "--resume", "--epochs", "3", "--log", str(log)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr
    assert "epoch 3/3" in cli.stdout and "step 27)" in cli.stdout, cli.stdout
    cli_losses = [r["loss"] for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "step"]

    # The page continues the same epoch (in Pyodide): its losses are the CLI's (measured: equal).
    train_epochs(page, 3, 120_000)
    assert app_state(page, "a.step") == 27 and app_state(page, "a.errors") == []
    page_losses = [l for s, l in app_state(page, "a.lossPoints()") if s > step0]
    assert len(page_losses) == len(cli_losses) == 9
    np.testing.assert_allclose(page_losses, cli_losses, rtol=0, atol=1e-5)

    # Both exports take the table's rows as typed (data.csv's, the color given as text) and agree.
    out = tmp_path / "cli.onnx"
    ex = subprocess.run([sys.executable, "-m", "pytrain", "export", str(run_dir), "-o", str(out)],
                        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert ex.returncode == 0, ex.stderr
    with open(run_dir / "data.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["a", "b", "color=blue", "color=green", "color=red", "target"]
    x = np.array([[float(v) for v in r[:-1]] for r in rows[1:]], np.float32)
    page_model = bytes(page.evaluate("async () => Array.from(await window.pytrainApp.client.call('exportModel'))"))

    def run(model):
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        color = np.array([["blue", "green", "red"][i] for i in np.argmax(x[:, 2:5], axis=1)], dtype=object)
        return sess.run(None, {"input": np.ascontiguousarray(x[:, :2]), "text": color.reshape(-1, 1)})[0]

    cli_pred, page_pred = run(out.read_bytes()), run(page_model)
    np.testing.assert_allclose(cli_pred, page_pred, rtol=1e-3, atol=1e-2)
    target = np.array([float(r[-1]) for r in rows[1:]])
    assert abs(cli_pred.mean() - target.mean()) < 0.5 * target.std()   # the target's units, not standard ones
    assert rec.foreign(site_url) == []
