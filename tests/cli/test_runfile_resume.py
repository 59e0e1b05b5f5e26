"""The page's run file (a zip) resumes in `pytrain train --resume` also for runs
on a table the page prepared (missing values filled/dropped, columns excluded, text one-hot encoded,
features standardised, regression targets scaled), with the same numbers as continuing in the page.

The page side is driven the way web/worker.js drives it: pytrain.webapp.Session calls (use_csv,
build_mlp / generate + set_scaling, configure, train_for, run_file, use_artifact_files)."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from pytrain.generator import models
from pytrain import webapp
from pytrain.device.api import CheckpointState
from pytrain.run import properties as A

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMBERS = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint", "pytrain-run.json",
           "data.csv"}


def _table(n: int = 90, seed: int = 0, classify: bool = False) -> str:
    """`;`-separated: an id column to exclude, NA and empty cells, a text column to one-hot, a
    regression target in the hundreds (or a text class label)."""
    rng = np.random.RandomState(seed)
    rows = ["id;a;b;color;c;" + ("kind" if classify else "target")]
    for i in range(n):
        a, b, c = rng.randn(), rng.randn() * 10 + 3, rng.rand()
        col = ("red", "green", "blue")[i % 3]
        t = 500 + 300 * a + 20 * b + {"red": 100, "green": -50, "blue": 0}[col] + rng.randn() * 5
        label = ("low" if t < 450 else "mid" if t < 650 else "high") if classify else "%.2f" % t
        cells = ["row%d" % i, "%.4f" % a, "%.3f" % b, col, "%.5f" % c, label]
        if i % 11 == 3:
            cells[1] = "NA"
        if i % 13 == 5:
            cells[4] = ""
        if i == 40:
            cells[5] = "NA"     # a row missing its label is dropped
        rows.append(";".join(cells))
    return "\n".join(rows) + "\n"


def _train(s: webapp.Session, steps: int) -> None:
    while s.run.at.step < steps:       # train_for stops at each epoch's end
        s.train_for(budget_ms=1e9, max_steps=steps - s.run.at.step)


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pytrain"] + list(argv), capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)


def _unzip(blob: bytes, where) -> str:
    z = zipfile.ZipFile(io.BytesIO(blob))
    assert set(z.namelist()) == MEMBERS
    z.extractall(str(where))
    return str(where)


def _step_losses(log_path) -> list:
    rows = [json.loads(line) for line in open(str(log_path))]
    return [r["loss"] for r in rows if r["kind"] == "step"]


def _continue_page(s: webapp.Session, epochs: int) -> list:
    losses = []
    while s.run.at.epoch < epochs:
        losses += s.train_for(budget_ms=1e9)["losses"]
    return losses


def _resume_and_compare(s: webapp.Session, run_dir: str, label: str, tmp_path) -> list:
    """`pytrain train --resume` one more epoch, and the same in the page: same steps, same losses."""
    step0, epochs = s.run.at.step, s.run.at.epoch + 1
    log = tmp_path / "log.jsonl"
    cli = _cli("train", run_dir, "--data", os.path.join(run_dir, "data.csv"), "--label", label, "--resume",
               "--epochs", str(epochs), "--log", str(log))
    assert cli.returncode == 0, cli.stderr
    page = _continue_page(s, epochs)
    assert "epoch %d/%d" % (epochs, epochs) in cli.stdout and "step %d)" % s.run.at.step in cli.stdout, cli.stdout
    cli_losses = _step_losses(log)
    assert len(cli_losses) == len(page) == s.run.at.step - step0 > 0
    np.testing.assert_allclose(cli_losses, page, rtol=0, atol=1e-5)
    state = CheckpointState.load_checkpoint(os.path.join(run_dir, "checkpoint"))
    assert (int(state.properties["epoch"]), int(state.properties["step"])) == (s.run.at.epoch, s.run.at.step)
    for name, p in s.run.state.parameters.items():
        np.testing.assert_allclose(state.parameters[name].data, p.data, rtol=0, atol=1e-5, err_msg=name)
    return page


def _rows(run_dir: str, label: str):
    """data.csv as numbers: (features the exported model takes, label column as text)."""
    with open(os.path.join(run_dir, "data.csv"), newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    assert header[-1] == label
    return np.array([[float(v) for v in r[:-1]] for r in body], np.float32), [r[-1] for r in body]


def _ort(model: bytes, x: np.ndarray) -> np.ndarray:
    """The exported model's answers for data.csv's rows (a, b, color=blue/green/red, c), given as the
    rows were typed: the numbers a, b, c and the color as text (pytrain.run.rows)."""
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    if [i.name for i in sess.get_inputs()] == ["input"]:
        return sess.run(None, {"input": x})[0]
    text = np.array([["blue", "green", "red"][i] for i in np.argmax(x[:, 2:5], axis=1)], dtype=object)
    return sess.run(None, {"input": np.ascontiguousarray(x[:, [0, 1, 5]]), "text": text.reshape(-1, 1)})[0]


def test_prepared_regression_table_resumes_in_the_cli(tmp_path):
    text = _table()
    s = webapp.Session()
    data = s.use_csv(text, "target", exclude=["id"], missing="fill", onehot=True)
    assert data["features"] == ["a", "b", "color=blue", "color=green", "color=red", "c"]
    s.build_mlp([8])                 # standardisation baked in the graph, targets scaled by the page
    assert s.model["scaling"]["y_mean"]
    s.configure(batch_size=8, lr=0.01)
    _train(s, 12)                    # mid-epoch: 9 batches per epoch
    assert (s.run.at.epoch, s.run.at.epoch_step) == (1, 3)
    run_dir = _unzip(s.run_file(), tmp_path / "run")

    # data.csv is the table as the model sees it: numbers only, comma-separated, label last
    x, y = _rows(run_dir, "target")
    assert x.shape == (89, 6) and len(y) == 89       # the row without a label is dropped
    assert np.isfinite(x).all() and set(np.unique(x[:, 2:5]).tolist()) == {0.0, 1.0}
    meta = json.loads(open(os.path.join(run_dir, "pytrain-run.json")).read())
    assert meta["data_source"]["prepared"]["missing"] == "fill"
    assert meta["data_source"]["prepared"]["exclude"] == ["id"]
    state = CheckpointState.load_checkpoint(os.path.join(run_dir, "checkpoint"))
    assert json.loads(state.properties[A.P_TARGET_SCALING])["output"] == "output"

    _resume_and_compare(s, run_dir, "target", tmp_path)

    # pytrain export: the table's rows as typed in, the target's own units out, as the page's export
    out_path = str(tmp_path / "model.onnx")
    ex = _cli("export", run_dir, "-o", out_path)
    assert ex.returncode == 0 and "target's units" in ex.stdout, ex.stderr
    assert "takes the table's rows as typed: a, b, c (number columns" in ex.stdout, ex.stdout
    cli_pred = _ort(open(out_path, "rb").read(), x)
    page_pred = _ort(s.export(), x)
    np.testing.assert_allclose(cli_pred, page_pred, rtol=1e-5, atol=1e-3)
    target = np.array([float(v) for v in y], np.float32)
    assert abs(float(cli_pred.mean()) - float(target.mean())) < 0.5 * float(target.std())
    np.testing.assert_allclose(s.predict(x[:3])["outputs"], cli_pred[:3], rtol=1e-5, atol=1e-3)

    # pytrain eval: mae in the target's units, from the same outputs
    ev = _cli("eval", run_dir, "--data", os.path.join(run_dir, "data.csv"), "--label", "target", "--json")
    assert ev.returncode == 0, ev.stderr
    mae = json.loads(ev.stdout)["mae"]
    assert mae == pytest.approx(float(np.mean(np.abs(cli_pred.reshape(-1) - target))), rel=1e-4)

    # and back into a page: the CLI's checkpoint with the zip's table, at the CLI's step
    files = {n: open(os.path.join(run_dir, n), "rb").read() for n in MEMBERS}
    r = webapp.Session()
    res = r.use_artifact_files(files)
    assert res["step"] == s.run.at.step and res["epoch"] == s.run.at.epoch
    assert (res["data"]["train"], res["data"]["val"]) == (s.data_summary()["train"], s.data_summary()["val"])
    assert res["data"]["features"] == data["features"]
    np.testing.assert_array_equal(r.source.data["train_x"], s.source.data["train_x"])
    np.testing.assert_allclose(r.run.module.get_contiguous_parameters(trainable_only=False),
                               s.run.module.get_contiguous_parameters(trainable_only=False), rtol=0, atol=1e-5)
    a = s.train_for(budget_ms=1e9, max_steps=3)["losses"]
    b = r.train_for(budget_ms=1e9, max_steps=3)["losses"]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_uploaded_model_with_feature_and_target_scaling_resumes(tmp_path):
    text = _table(seed=1)
    s = webapp.Session()
    s.use_csv(text, "target", exclude=["id"], missing="drop", onehot=True)
    n_in = s.data_summary()["sample_shape"][0]
    s.generate(models.to_bytes(models.mlp(n_in, [8], 1, seed=3)), loss="MSELoss", optimizer="Adam")
    s.set_scaling(features=True)    # outside the graph, as for an uploaded model
    assert {"x_mean", "y_mean"} <= set(s.model["scaling"])
    s.configure(batch_size=10, lr=0.01)
    _train(s, 9)
    run_dir = _unzip(s.run_file(), tmp_path / "run")
    state = CheckpointState.load_checkpoint(os.path.join(run_dir, "checkpoint"))
    assert A.P_STANDARDIZER in state.properties and A.read_settings(state)["standardize"] is True
    x, y = _rows(run_dir, "target")
    assert len(x) == s.data_summary()["train"] + s.data_summary()["val"]   # rows with gaps dropped

    _resume_and_compare(s, run_dir, "target", tmp_path)
    out_path = str(tmp_path / "model.onnx")
    ex = _cli("export", run_dir, "-o", out_path)
    assert ex.returncode == 0, ex.stderr
    assert "standardisation" in ex.stdout and "target's units" in ex.stdout
    np.testing.assert_allclose(_ort(open(out_path, "rb").read(), x), _ort(s.export(), x), rtol=1e-5, atol=1e-3)


def test_prepared_classification_table_resumes(tmp_path):
    s = webapp.Session()
    s.use_csv(_table(seed=2, classify=True), "kind", exclude=["id"], missing="fill", onehot=True)
    assert s.source.data["classes"] == ["high", "low", "mid"]
    s.build_mlp([8])
    s.configure(batch_size=16, lr=0.01)
    _train(s, 7)
    run_dir = _unzip(s.run_file(), tmp_path / "run")
    x, y = _rows(run_dir, "kind")
    assert set(y) == {"high", "low", "mid"}
    _resume_and_compare(s, run_dir, "kind", tmp_path)
    out_path = str(tmp_path / "model.onnx")
    assert _cli("export", run_dir, "-o", out_path).returncode == 0
    np.testing.assert_allclose(_ort(open(out_path, "rb").read(), x), _ort(s.export(), x), rtol=1e-5, atol=1e-4)


def test_cli_refuses_other_data_for_a_prepared_run(tmp_path):
    s = webapp.Session()
    s.use_csv(_table(), "target", exclude=["id"], missing="fill", onehot=True)
    s.build_mlp([4])
    s.configure(batch_size=8)
    _train(s, 4)
    run_dir = _unzip(s.run_file(), tmp_path / "run")
    # the original file (with its ; and NA cells) is not the table the model sees
    raw = tmp_path / "raw.csv"
    raw.write_text(_table())
    res = _cli("train", run_dir, "--data", str(raw), "--label", "target", "--resume", "--epochs", "2")
    assert res.returncode == 1 and "pytrain: error:" in res.stderr and "target" in res.stderr, res.stderr
    # one value changed in data.csv: same shape, other numbers
    path = os.path.join(run_dir, "data.csv")
    lines = open(path).read().splitlines()
    cells = lines[5].split(",")
    cells[1] = "123.5"
    lines[5] = ",".join(cells)
    open(path, "w").write("\n".join(lines) + "\n")
    res = _cli("train", run_dir, "--data", path, "--label", "target", "--resume", "--epochs", "2")
    assert res.returncode == 1 and "training data differs" in res.stderr, res.stderr


def _seed_mismatch() -> webapp.Session:
    s = webapp.Session()     # the split drawn with seed 1, batches shuffled with seed 0
    s.use_csv(_table(), "target", seed=1, exclude=["id"], missing="fill", onehot=True)
    s.build_mlp([4])
    return s


def _added_samples() -> webapp.Session:
    s = webapp.Session()
    s.use_csv(_table(), "target", exclude=["id"], missing="fill", onehot=True)
    s.build_mlp([4])
    s.add_samples(np.zeros((1, 6), np.float32), [1.0])
    return s


def _bce_on_classes() -> webapp.Session:
    s = webapp.Session()     # the page trains BCE on one-hot class targets; the CLI reads the label as floats
    s.use_csv(_table(classify=True), "kind", exclude=["id"], missing="fill", onehot=True)
    s.generate(models.to_bytes(models.mlp(6, [4], 3)), loss="BCEWithLogitsLoss")
    return s


@pytest.mark.parametrize("make, label, why", [
    (_seed_mismatch, "target", "seed 1 and the shuffling seed 0"),
    (_added_samples, "target", "1 sample(s) were added"),
    (_bce_on_classes, "kind", "BCEWithLogitsLoss"),
])
def test_what_the_cli_cannot_reproduce_is_refused_by_resume(tmp_path, make, label, why):
    s = make()
    s.configure(batch_size=8)
    s.train_for(budget_ms=1e9, max_steps=3)
    blob = s.run_file()
    # the page and the widget still take the run back, at its step
    r = webapp.Session()
    res = r.use_artifact_files({"run.zip": blob})
    assert res["step"] == 3 and r.digest() == s.digest()
    # the CLI refuses to continue it, saying what and why
    run_dir = _unzip(blob, tmp_path / "run")
    out = _cli("train", run_dir, "--data", os.path.join(run_dir, "data.csv"), "--label", label, "--resume",
               "--epochs", "2")
    assert out.returncode == 1, out.stdout
    assert "cannot continue exactly" in out.stderr and why in out.stderr, out.stderr
    assert int(CheckpointState.load_checkpoint(os.path.join(run_dir, "checkpoint")).properties["step"]) == 3
