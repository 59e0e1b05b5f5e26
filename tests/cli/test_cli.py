"""Tests of the ``pytrain`` command on scikit-learn's digits (npz and CSV), run in-process through
``pytrain.cli.main`` and once as ``python -m pytrain``."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits

from pytrain import data
from pytrain.generator import models
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.cli import main
from pytrain.cli._progress import Progress

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = ["--epochs", "5", "--lr", "0.01", "--batch-size", "32", "--validation-split", "0.2",
         "--quiet"]


# ---------------------------------------------------------------- fixtures and helpers

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """digits as npz (scaled to [0, 1]) and as CSV with text labels, plus an MLP for it."""
    root = tmp_path_factory.mktemp("cli")
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    np.savez(root / "digits.npz", x=x, y=d.target)
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    (root / "digits.csv").write_text(data.to_csv_text(d.data.astype(np.float32), names[d.target], label="digit"))
    (root / "mlp.onnx").write_bytes(models.to_bytes(models.mlp(64, [32], 10, seed=0)))
    return {"root": root, "npz": str(root / "digits.npz"), "csv": str(root / "digits.csv"),
            "model": str(root / "mlp.onnx"), "x": x, "y": d.target, "names": names}


def run(capsys, *argv):
    """(exit code, stdout, stderr) of ``pytrain argv`` run in-process."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def generate(capsys, files, out_dir, *extra):
    code, out, err = run(capsys, "generate", files["model"], "-o", out_dir, *extra)
    assert code == 0, err
    return out


def params(directory):
    state = CheckpointState.load_checkpoint(os.path.join(str(directory), "checkpoint"))
    return state, {k: p.data.copy() for k, p in state.parameters.items()}


def one_error_line(err, *fragments):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pytrain: error: "), err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def trained(files, tmp_path_factory):
    """An artifact directory trained 5 epochs on the npz (shared by several tests)."""
    out = tmp_path_factory.mktemp("trained") / "arts"
    assert main(["generate", files["model"], "-o", str(out), "--optimizer", "adam"]) == 0
    log = str(out.parent / "log.jsonl")
    assert main(["train", str(out), "--data", files["npz"], "--log", log] + TRAIN) == 0
    return {"dir": str(out), "log": log}


# ---------------------------------------------------------------- the main flow

def test_generate_summary(capsys, files, tmp_path):
    out = generate(capsys, files, tmp_path / "a", "--optimizer", "sgd", "--momentum", "0.9",
                   "--nesterov", "--max-grad-norm", "5")
    assert sorted(os.listdir(tmp_path / "a")) == ["checkpoint", "eval_model.onnx",
                                                  "optimizer_model.onnx", "training_model.onnx"]
    assert "trainable: 2,410 parameters in 4 tensors" in out  # 64*32+32 + 32*10+10
    assert "fc1.weight  [32, 64]  2,048" in out
    assert "frozen: 0 parameters in 0 tensors" in out
    assert "ops: Gemm x2, Relu x1" in out
    assert "SGD(" in out and "momentum=0.9" in out and "nesterov=1" in out and "max_grad_norm=5" in out
    state = CheckpointState.load_checkpoint(str(tmp_path / "a" / "checkpoint"))
    assert state.properties["pytrain.loss"] == "ce"
    assert json.loads(state.properties["pytrain.outputs"]) == ["output"]


def test_train_eval_export_agree_with_onnxruntime(capsys, files, trained, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    code, out, err = run(capsys, "eval", trained["dir"], "--data", files["npz"], "--json",
                         "--save-outputs", tmp_path / "logits.npy")
    assert code == 0, err
    result = json.loads(out)
    assert result["samples"] == 1797
    assert result["accuracy"] >= 0.95
    logits = np.load(str(tmp_path / "logits.npy"))
    assert logits.shape == (1797, 10)
    np.testing.assert_allclose(result["accuracy"], np.mean(logits.argmax(1) == files["y"]))

    code, out, err = run(capsys, "export", trained["dir"], "-o", tmp_path / "final.onnx")
    assert code == 0, err
    assert "inputs: input [N, 64]" in out and "outputs: output [N, 10]" in out
    sess = ort.InferenceSession(str(tmp_path / "final.onnx"), providers=["CPUExecutionProvider"])
    ort_logits = sess.run(None, {"input": files["x"]})[0]
    np.testing.assert_allclose(ort_logits, logits, rtol=1e-4, atol=1e-4)
    assert np.mean(ort_logits.argmax(1) == files["y"]) == result["accuracy"]
    # the human-readable form says the same
    code, out, _ = run(capsys, "eval", trained["dir"], "--data", files["npz"])
    assert out.strip() == "1797 samples  loss {:.4f}  accuracy {:.2f}%".format(
        result["loss"], 100 * result["accuracy"])


def test_training_log_and_checkpoint_properties(trained):
    rows = [json.loads(line) for line in open(trained["log"])]
    steps = [r for r in rows if r["kind"] == "step"]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    per_epoch = data.num_batches(1797 - round(1797 * 0.2), 32)
    assert len(steps) == 5 * per_epoch and [r["step"] for r in steps] == list(range(1, 5 * per_epoch + 1))
    assert [r["epoch"] for r in epochs] == [1, 2, 3, 4, 5]
    assert all(r["lr"] == pytest.approx(0.01) for r in steps)
    assert epochs[-1]["val_accuracy"] >= 0.9 and epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    state, _ = params(trained["dir"])
    props = state.properties
    assert props["epoch"] == 5 and props["step"] == 5 * per_epoch and props["seed"] == 0
    assert props["epoch_step"] == 0
    assert state.optimizer_state.step == 5 * per_epoch


def test_csv_text_labels_standardized_and_exported(capsys, files, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    arts = str(tmp_path / "arts")
    generate(capsys, files, arts)
    code, out, err = run(capsys, "train", arts, "--data", files["csv"], "--label", "digit",
                         "--standardize", "--log", tmp_path / "log.csv", *TRAIN)
    assert code == 0, err
    lines = [l for l in out.splitlines() if l.startswith("epoch ")]
    assert len(lines) == 5 and "val accuracy" in lines[-1]
    header = open(str(tmp_path / "log.csv")).readline().strip().split(",")
    assert header[:5] == ["kind", "epoch", "step", "loss", "lr"]
    state, _ = params(arts)
    classes = json.loads(state.properties["pytrain.classes"])
    assert classes == sorted(files["names"].tolist())
    code, out, err = run(capsys, "eval", arts, "--data", files["csv"], "--label", "digit", "--json",
                         "--save-outputs", tmp_path / "logits.npy")
    assert code == 0, err
    result = json.loads(out)
    assert result["accuracy"] >= 0.95
    # export builds the standardisation in: onnxruntime on the raw CSV features agrees
    code, out, err = run(capsys, "export", arts, "-o", tmp_path / "m.onnx")
    assert code == 0 and "standardisation" in out, err
    raw = data.load_csv(files["csv"], label="digit")
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    ort_logits = sess.run(None, {"input": raw.x})[0]
    np.testing.assert_allclose(ort_logits, np.load(str(tmp_path / "logits.npy")), rtol=1e-4, atol=1e-4)
    predicted = np.array(classes)[ort_logits.argmax(1)]
    assert np.mean(predicted == files["names"][files["y"]]) == result["accuracy"]


# ---------------------------------------------------------------- resume

RESUME_TRAIN = ["--epochs", "5", "--lr", "0.01", "--batch-size", "64", "--validation-split", "0.1",
                "--scheduler", "linear", "--warmup", "10", "--seed", "3", "--quiet"]


@pytest.fixture(scope="module")
def uninterrupted(files, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("full") / "arts")
    assert main(["generate", files["model"], "-o", out]) == 0
    assert main(["train", out, "--data", files["npz"]] + RESUME_TRAIN) == 0
    return params(out)


def assert_same_run(a, b):
    state_a, pa = a
    state_b, pb = b
    assert pa.keys() == pb.keys()
    for k in pa:
        assert np.array_equal(pa[k], pb[k]), k
    oa, ob = state_a.optimizer_state, state_b.optimizer_state
    assert oa.step == ob.step and oa.learning_rate == ob.learning_rate
    for p in oa.slots:
        for s in oa.slots[p]:
            assert np.array_equal(oa.slots[p][s], ob.slots[p][s]), (p, s)
    for key in ("epoch", "step", "epoch_step", "seed"):
        assert state_a.properties[key] == state_b.properties[key]


def test_ctrl_c_after_epoch_2_then_resume_is_exact(capsys, files, tmp_path, monkeypatch, uninterrupted):
    arts = str(tmp_path / "arts")
    generate(capsys, files, arts)
    per_epoch = data.num_batches(1797 - round(1797 * 0.1), 64)
    real_step = Optimizer.step
    calls = {"n": 0}

    def step_then_ctrl_c(self):
        real_step(self)
        calls["n"] += 1
        if calls["n"] == 2 * per_epoch:  # the last step of epoch 2: Ctrl-C arrives now
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Optimizer, "step", step_then_ctrl_c)
    code, out, err = run(capsys, "train", arts, "--data", files["npz"], *RESUME_TRAIN)
    assert code == 130, err
    assert "interrupted" in err and "--resume" in err
    assert out.count("epoch ") == 2  # epochs 1 and 2 finished and reported
    state, _ = params(arts)
    assert state.properties["epoch"] == 2 and state.properties["epoch_step"] == 0
    assert state.properties["step"] == 2 * per_epoch
    monkeypatch.setattr(Optimizer, "step", real_step)
    code, out, err = run(capsys, "train", arts, "--data", files["npz"], "--resume", "--quiet")
    assert code == 0, err
    assert [l.split()[1] for l in out.splitlines() if l.startswith("epoch ")] == ["3/5", "4/5", "5/5"]
    assert_same_run(uninterrupted, params(arts))


def test_interrupt_mid_epoch_then_resume_is_exact(capsys, files, tmp_path, monkeypatch, uninterrupted):
    """A KeyboardInterrupt raised inside a train step (no signal handler involved)."""
    arts = str(tmp_path / "arts")
    generate(capsys, files, arts)
    real_call = Module.__call__
    calls = {"n": 0}

    def call(self, *inputs):
        if self.training:
            calls["n"] += 1
            if calls["n"] == 70:  # in epoch 3, before the step's forward pass
                raise KeyboardInterrupt
        return real_call(self, *inputs)

    monkeypatch.setattr(Module, "__call__", call)
    code, out, err = run(capsys, "train", arts, "--data", files["npz"], *RESUME_TRAIN)
    assert code == 130
    state, _ = params(arts)
    per_epoch = data.num_batches(1797 - round(1797 * 0.1), 64)
    assert state.properties["step"] == 69
    assert state.properties["epoch"] == 69 // per_epoch
    assert state.properties["epoch_step"] == 69 % per_epoch
    monkeypatch.setattr(Module, "__call__", real_call)
    code, out, err = run(capsys, "train", arts, "--data", files["npz"], "--resume", "--quiet")
    assert code == 0, err
    assert_same_run(uninterrupted, params(arts))
    # resuming a finished run does nothing
    before = open(os.path.join(arts, "checkpoint"), "rb").read()
    code, out, _ = run(capsys, "train", arts, "--data", files["npz"], "--resume")
    assert code == 0 and "nothing to do" in out
    assert open(os.path.join(arts, "checkpoint"), "rb").read() == before


# ---------------------------------------------------------------- partial training, other formats

def test_trainable_ops_1_trains_only_the_last_layer(capsys, files, tmp_path):
    arts = str(tmp_path / "arts")
    out = generate(capsys, files, arts, "--trainable-ops", "1")
    assert "trainable: 330 parameters in 2 tensors" in out and "frozen: 2,080 parameters in 2 tensors" in out
    _, before = params(arts)
    code, _, err = run(capsys, "train", arts, "--data", files["npz"], "--epochs", "1", "--quiet")
    assert code == 0, err
    state, after = params(arts)
    assert np.array_equal(before["fc1.weight"], after["fc1.weight"])
    assert np.array_equal(before["fc1.bias"], after["fc1.bias"])
    assert not np.array_equal(before["fc2.weight"], after["fc2.weight"])
    assert not np.array_equal(before["fc2.bias"], after["fc2.bias"])
    assert [k for k, p in state.parameters.items() if p.requires_grad] == ["fc2.weight", "fc2.bias"]


def test_regression_csv_with_mse(capsys, tmp_path):
    db = load_diabetes()
    path = tmp_path / "diabetes.csv"
    path.write_text(data.to_csv_text(db.data.astype(np.float32), db.target.astype(np.float32) / 100,
                                     feature_names=db.feature_names, label="progression"))
    (tmp_path / "reg.onnx").write_bytes(models.to_bytes(models.mlp(10, [16], 1, seed=1)))
    arts = str(tmp_path / "arts")
    code, out, err = run(capsys, "generate", tmp_path / "reg.onnx", "-o", arts, "--loss", "mse",
                         "--optimizer", "adam")
    assert code == 0, err
    code, out, err = run(capsys, "train", arts, "--data", path, "--label", "progression", "--task",
                         "regression", "--epochs", "3", "--lr", "0.01", "--standardize",
                         "--validation-split", "0.2", "--quiet")
    assert code == 0, err
    assert "val mae" in out.splitlines()[-2]
    code, out, err = run(capsys, "eval", arts, "--data", path, "--label", "progression", "--json")
    result = json.loads(out)
    assert 0 < result["mae"] < 1.5  # targets /100 have a spread of ~0.8
    code, out, err = run(capsys, "eval", arts, "--data", path, "--label", "progression", "--metric",
                         "accuracy")
    one_error_line(err, "metric 'accuracy' needs a classification loss")


def test_raw_onert_files(capsys, files, tmp_path):
    data.save_raw(files["x"], str(tmp_path / "in.bin"))
    data.save_raw(np.eye(10, dtype=np.float32)[files["y"]], str(tmp_path / "exp.bin"))
    arts = str(tmp_path / "arts")
    generate(capsys, files, arts)
    code, _, err = run(capsys, "train", arts, "--data", tmp_path / "in.bin", "--expected",
                       tmp_path / "exp.bin", "--epochs", "2", "--lr", "0.01", "--quiet")
    assert code == 0, err
    code, out, err = run(capsys, "eval", arts, "--data", tmp_path / "in.bin", "--expected",
                         tmp_path / "exp.bin", "--input-shape", "64", "--json")
    assert code == 0, err
    assert json.loads(out)["accuracy"] > 0.8
    code, _, err = run(capsys, "eval", arts, "--data", tmp_path / "in.bin", "--expected",
                       tmp_path / "exp.bin", "--input-shape", "60")
    one_error_line(err, "not a multiple of 240 bytes")


def test_image_folder_with_a_cnn(capsys, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    d = load_digits()
    root = tmp_path / "imgs"
    for i in range(150):
        folder = root / "digit{}".format(d.target[i] % 3)
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (d.images[i] * 255 / 16).astype(np.uint8)
        Image.fromarray(pixels, mode="L").resize((16, 16)).save(str(folder / "{}.png".format(i)))
    (tmp_path / "cnn.onnx").write_bytes(models.to_bytes(models.cnn(input_shape=(1, 8, 8), num_classes=3, seed=0)))
    arts = str(tmp_path / "arts")
    code, _, err = run(capsys, "generate", tmp_path / "cnn.onnx", "-o", arts)
    assert code == 0, err
    code, out, err = run(capsys, "train", arts, "--data", root, "--epochs", "2", "--quiet")
    assert code == 0, err  # images resized to the model's 8x8 input
    state, _ = params(arts)
    assert json.loads(state.properties["pytrain.classes"]) == ["digit0", "digit1", "digit2"]
    code, out, err = run(capsys, "eval", arts, "--data", root)
    assert code == 0 and out.startswith("150 samples  loss "), err


def test_inspect(capsys, files, trained):
    code, out, err = run(capsys, "inspect", files["model"])
    assert code == 0, err
    assert "input  float32  [N, 64]" in out
    assert "initializers: 4 tensors, 2,410 values" in out
    assert "Gemm      2  yes     yes" in out
    assert "pytrain can run and train every op of this model" in out
    code, out, err = run(capsys, "inspect", os.path.join(trained["dir"], "checkpoint"))
    assert code == 0, err
    assert "parameters: 4 tensors, 2,410 values (2,410 trainable in 4 tensors)" in out
    assert "optimizer state: step" in out and "exp_avg, exp_avg_sq for 4 parameters" in out
    assert "  epoch = 5" in out
    code, out, err = run(capsys, "inspect", trained["dir"])
    assert code == 0 and "artifact directory" in out and "training_model.onnx" in out


def test_inspect_reports_ops_without_kernel_or_gradient(capsys, tmp_path):
    from pytrain.base.dtypes import FLOAT
    from pytrain.proto import make_graph, make_model, make_node, make_opsetid, make_value_info

    g = make_graph([make_node("Relu", ["x"], ["r"]), make_node("Floor", ["r"], ["f"]),
                    make_node("NoSuchOp", ["f"], ["y"])], "g",
                   [make_value_info("x", FLOAT, ["N", 4])],
                   [make_value_info("y", FLOAT, ["N", 4])])
    path = tmp_path / "odd.onnx"
    path.write_bytes(make_model(g, [make_opsetid("", 17)]).SerializeToString())
    code, out, err = run(capsys, "inspect", path)
    assert code == 0, err
    assert "pytrain cannot run: NoSuchOp (no kernel)" in out
    assert "NoSuchOp      1  NO      -" in out


def test_progress_bar_on_a_terminal():
    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    tty = Tty()
    bar = Progress(tty)
    bar.start("epoch 1/2", 10)
    for i in range(1, 11):
        bar.update(i, 0.5)
    bar.finish()
    assert "\repoch 1/2 [" in tty.text and "10/10" in tty.text
    assert "steps/s" in tty.text and "loss 0.5000" in tty.text and "ETA" in tty.text


# ---------------------------------------------------------------- bad inputs

@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, files):
    root = tmp_path_factory.mktemp("bad")
    (root / "text_cell.csv").write_text("a,b,label\n1,2,0\n3,hello,1\n")
    (root / "narrow.npz").write_bytes(b"")
    np.savez(root / "narrow.npz", x=files["x"][:, :32], y=files["y"])
    np.savez(root / "bigclass.npz", x=files["x"][:20], y=np.arange(20))
    (root / "junk.onnx").write_bytes(b"\x08\x07garbage that is not a protobuf model \xff\xff")
    return root


@pytest.fixture
def arts_copy(trained, tmp_path):
    """A copy of the trained directory, and a function telling whether its files are unchanged."""
    path = str(tmp_path / "arts")
    shutil.copytree(trained["dir"], path)
    snapshot = {f: open(os.path.join(path, f), "rb").read() for f in os.listdir(path)}

    def unchanged():
        now = {f: open(os.path.join(path, f), "rb").read() for f in os.listdir(path)}
        return now == snapshot

    return path, unchanged


@pytest.mark.parametrize("argv, fragments", [
    (["train", "{arts}", "--data", "{root}/missing.npz"], ["data file", "missing.npz", "does not exist"]),
    (["train", "{arts}", "--data", "{bad}/text_cell.csv", "--label", "label"],
     ["text_cell.csv line 3, column 'b': 'hello' is not a number"]),
    (["train", "{arts}", "--data", "{csv}", "--label", "target"],
     ["label column 'target' not found; available columns: 'f0'", "'digit'"]),
    (["train", "{arts}", "--data", "{csv}"], ["no label column given"]),
    (["train", "{arts}", "--data", "{bad}/narrow.npz"],
     ["narrow.npz: samples have shape [32] (32 values) but model input 'input' takes [N, 64]"]),
    (["train", "{arts}", "--data", "{bad}/bigclass.npz"], ["sample 19 has class id 19 but the model has 10 outputs"]),
    (["train", "{arts}", "--data", "{npz}", "--task", "regression"], ["--task regression does not fit the model"]),
    (["train", "{arts}", "--data", "{npz}", "--resume", "--batch-size", "7"],
     ["--batch-size 7 differs from the interrupted run's 32"]),
    (["train", "{arts}", "--data", "{csv}", "--label", "digit", "--resume"],
     ["the training data differs from the interrupted run's"]),
    (["train", "{arts}", "--data", "{npz}", "--epochs", "0"], ["--epochs must be at least 1"]),
    (["train", "{arts}", "--data", "{npz}", "--scheduler", "linear", "--warmup", "100000", "--epochs", "1"],
     ["--warmup 100000 is longer than the whole run"]),
    (["train", "{arts}", "--data", "{npz}", "--log", "{root}/log.txt"], ["use a .csv or .jsonl file name"]),
    (["train", "{root}/nowhere", "--data", "{npz}"], ["artifact directory", "nowhere does not exist"]),
    (["eval", "{arts}", "--data", "{bad}/narrow.npz"], ["samples have shape [32]"]),
    (["export", "{arts}", "-o", "{root}/no/such/dir/m.onnx"], ["directory", "does not exist"]),
    (["export", "{arts}", "-o", "{root}/m.onnx", "--outputs", "nope"], ["nope"]),
    (["generate", "{root}/missing.onnx", "-o", "{root}/new"], ["missing.onnx does not exist"]),
    (["generate", "{bad}/junk.onnx", "-o", "{root}/new"], ["junk.onnx"]),
    (["generate", "{model}", "-o", "{arts}"], ["already holds training artifacts", "--force"]),
    (["generate", "{model}", "-o", "{root}/new", "--optimizer", "adam", "--momentum", "0.9"],
     ["--momentum applies to --optimizer sgd only, not adam"]),
    (["generate", "{model}", "-o", "{root}/new", "--requires-grad", "fc9.weight"],
     ["requires_grad names 'fc9.weight'"]),
    (["inspect", "{bad}/junk.onnx"], ["junk.onnx is neither an ONNX model nor a pytrain or ONNX Runtime checkpoint"]),
    (["inspect", "{root}/missing.onnx"], ["missing.onnx does not exist"]),
])
def test_bad_inputs_exit_with_one_line(capsys, files, bad_files, arts_copy, argv, fragments):
    arts, unchanged = arts_copy
    fill = {"arts": arts, "root": str(files["root"]), "bad": str(bad_files), "csv": files["csv"],
            "npz": files["npz"], "model": files["model"]}
    code, _, err = run(capsys, *[a.format(**fill) for a in argv])
    assert code == 1
    one_error_line(err, *fragments)
    assert unchanged()
    assert not os.path.exists(os.path.join(str(files["root"]), "new"))


def test_usage_errors_are_one_line_too(capsys, files):
    code, _, err = run(capsys, "train", "--data", files["npz"])
    assert code == 2
    one_error_line(err, "the following arguments are required: DIR")
    code, _, err = run(capsys, "generate", files["model"], "-o", "x", "--frozen", "a", "--trainable-ops", "1")
    assert code == 2
    one_error_line(err, "not allowed with argument")
    code, _, err = run(capsys)
    assert code == 2
    one_error_line(err, "choose a command")


def test_corrupted_checkpoint(capsys, files, arts_copy):
    arts, _ = arts_copy
    ck = os.path.join(arts, "checkpoint")
    with open(ck, "rb") as f:
        blob = f.read()
    with open(ck, "wb") as f:
        f.write(blob[: len(blob) // 2])
    for argv in (["train", arts, "--data", files["npz"]], ["eval", arts, "--data", files["npz"]],
                 ["export", arts, "-o", os.path.join(arts, "m.onnx")], ["inspect", ck]):
        code, _, err = run(capsys, *argv)
        assert code == 1
        one_error_line(err, "checkpoint", "corrupted")
    assert open(ck, "rb").read() == blob[: len(blob) // 2]
    assert not os.path.exists(os.path.join(arts, "m.onnx"))


def test_incomplete_artifact_directory(capsys, files, arts_copy):
    arts, _ = arts_copy
    os.remove(os.path.join(arts, "optimizer_model.onnx"))
    code, _, err = run(capsys, "train", arts, "--data", files["npz"])
    one_error_line(err, "not a complete artifact directory: missing optimizer_model.onnx")


def test_resume_without_progress(capsys, files, tmp_path):
    arts = str(tmp_path / "arts")
    generate(capsys, files, arts)
    code, _, err = run(capsys, "train", arts, "--data", files["npz"], "--resume")
    assert code == 1
    one_error_line(err, "nothing to resume")


# ---------------------------------------------------------------- as a real process

def test_python_dash_m_pytrain(files, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    arts = str(tmp_path / "arts")
    proc = subprocess.run([sys.executable, "-m", "pytrain", "generate", files["model"], "-o", arts,
                           "--trainable-ops", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "trainable: 330 parameters" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pytrain", "train", arts, "--data", files["npz"],
                           "--epochs", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("epoch 1/1  loss ")
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pytrain", "eval", arts, "--data",
                           str(tmp_path / "nope.csv"), "--label", "y"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "pytrain: error: data file {!r} does not exist".format(str(tmp_path / "nope.csv"))]
