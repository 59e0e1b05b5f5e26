"""pytrain on the browser's Python: 3.8 with numpy 1.17 (what the offline Pyodide ships).

The same artifacts trained for the same steps on CPython 3.11 + numpy 2 and on Python 3.8 +
numpy 1.17.5 give the same losses and weights (to float32 rounding). Needs a python3.8 on the
machine (pyenv's, or on PATH); the venv with numpy 1.17.5 is built once and cached."""
from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.device.api import CheckpointState, Module, Optimizer
d = np.load(sys.argv[2])
out = {}
for case in d["cases"]:
    case = str(case)
    arts = [bytes(d[case + "_" + k].tobytes()) for k in ("training", "eval", "optimizer", "checkpoint")]
    state = CheckpointState.load_checkpoint(arts[3])
    module = Module(arts[0], state, arts[1])
    opt = Optimizer(arts[2], module)
    opt.set_learning_rate(float(d[case + "_lr"]))
    losses = []
    for x, y in zip(d[case + "_x"], d[case + "_y"]):
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()
    out[case + "_losses"] = np.array(losses)
    for name, p in state.parameters.items():
        out[case + "/" + name] = p.data
np.savez(sys.argv[3], numpy_version=np.__version__, **out)
"""


def _python38():
    from buildsite.installs import python38

    return python38()


@pytest.fixture(scope="module")
def py38():
    from buildsite.installs import ensure_py38_venv

    py = ensure_py38_venv()   # (python build.py test makes it before the suite runs)
    if py is None:
        pytest.skip("no python3.8 on this machine")
    version = subprocess.run([str(py), "-c", "import numpy, sys; print(sys.version_info[:2], numpy.__version__)"],
                             check=True, capture_output=True, text=True).stdout
    assert "(3, 8)" in version and "1.17.5" in version
    return py


def _cases():
    torch = pytest.importorskip("torch")
    from torch_models import CNN, TokenModel, export, seeded

    from pytrain.generator import artifacts, models

    rng = np.random.default_rng(3)
    cases = {}
    cnn = seeded(CNN)
    cases["cnn"] = (export(copy.deepcopy(cnn), torch.zeros(2, 1, 12, 12)), artifacts.SGD(momentum=0.9), 0.05,
                    rng.standard_normal((6, 8, 1, 12, 12)).astype(np.float32), rng.integers(0, 4, (6, 8)))
    tok = seeded(TokenModel)
    cases["tokens"] = (export(copy.deepcopy(tok), torch.zeros(2, 7, dtype=torch.long)), artifacts.AdamW(), 1e-2,
                       rng.integers(0, 50, (6, 8, 7)), rng.integers(0, 3, (6, 8)))
    cases["mlp"] = (models.mlp(10, [16], 3, activation="gelu").SerializeToString(),
                    artifacts.Adam(weight_decay=0.01, max_grad_norm=0.5), 1e-2,
                    rng.standard_normal((6, 8, 10)).astype(np.float32), rng.integers(0, 3, (6, 8)))
    return cases


def _run_here(arts, lr, xs, ys):
    from train_helpers import train_steps

    losses, state = train_steps(arts, zip(xs, ys), lr)
    return losses, {k: p.data for k, p in state.parameters.items()}


def test_same_training_on_python38_numpy117(py38, tmp_path):
    from pytrain.generator import artifacts

    feed = {"cases": np.array(sorted(_cases()))}
    expected = {}
    for case, (model, optim, lr, xs, ys) in _cases().items():
        arts = artifacts.generate_artifacts(model, optimizer=optim)
        for key, blob in zip(("training", "eval", "optimizer", "checkpoint"),
                             (arts.training_model, arts.eval_model, arts.optimizer_model, arts.checkpoint)):
            feed[case + "_" + key] = np.frombuffer(blob, dtype=np.uint8)
        feed[case + "_lr"], feed[case + "_x"], feed[case + "_y"] = np.array(lr), xs, ys.astype(np.int64)
        expected[case] = _run_here(arts, lr, xs, ys.astype(np.int64))
    np.savez(tmp_path / "in.npz", **feed)
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    subprocess.run([str(py38), str(script), str(ROOT), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                   check=True, timeout=600)
    got = np.load(tmp_path / "out.npz")
    assert str(got["numpy_version"]) == "1.17.5"
    for case, (losses, params) in expected.items():
        np.testing.assert_allclose(got[case + "_losses"], losses, rtol=1e-5, err_msg=case)
        for name, value in params.items():
            assert got[case + "/" + name].dtype == value.dtype
            np.testing.assert_allclose(got[case + "/" + name], value, rtol=1e-4, atol=1e-6, err_msg=case + "/" + name)


def test_data_and_cli_on_python38_numpy117(py38, tmp_path):
    """pytrain.data (which the browser also uses for CSV uploads) and the CLI on numpy 1.17."""
    from sklearn.datasets import load_iris

    from pytrain.generator import models

    x, y = load_iris(return_X_y=True)
    names = ["setosa", "versicolor", "virginica"]
    rows = ["a,b,c,d,species"] + ["%s,%s" % (",".join("%.1f" % v for v in xi), names[yi]) for xi, yi in zip(x, y)]
    (tmp_path / "iris.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "mlp.onnx").write_bytes(models.mlp(4, [16], 3).SerializeToString())
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def cli(*args):
        r = subprocess.run([str(py38), "-m", "pytrain"] + list(args), cwd=str(tmp_path), env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    cli("generate", "mlp.onnx", "-o", "arts", "--loss", "ce", "--optimizer", "adamw")
    cli("train", "arts", "--data", "iris.csv", "--label", "species", "--epochs", "30", "--lr", "0.01",
        "--batch-size", "16", "--standardize", "--seed", "1")
    out = cli("eval", "arts", "--data", "iris.csv", "--label", "species")
    accuracy = float(out.split("accuracy")[1].split("%")[0])
    assert accuracy >= 90.0, out
