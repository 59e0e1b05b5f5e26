"""pytrain's own API (``pytrain.api``) takes the artifacts ONNX Runtime 1.19.2's ``generate_artifacts``
made, as ``pytrain.ort.api`` does (one reader, ``pytrain/device/ort_made.py``): ORT's checkpoint, training,
eval and optimizer models train 10 steps with ORT's losses and parameters.

Fixtures: tests/compat/fixtures/ort_made_models/<case>/ (see test_ort_made_models.py)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.errors import ModelFormatError
from pytrain.proto import ModelProto, make_attribute

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "api"))
from test_python38_numpy117 import py38  # noqa: E402,F401  (the fixture: Python 3.8 + numpy 1.17.5)

MODELS = os.path.join(os.path.dirname(__file__), "fixtures", "ort_made_models")


def _batches(ort):
    names = ["x"] if "x" in ort.files else sorted(k for k in ort.files if k[0] == "x" and k[1:].isdigit())
    return [ort[k].astype(np.float32) if ort[k].dtype == np.float16 else ort[k] for k in names]


@pytest.mark.parametrize("case", ["mlp_sgd", "cnn_adamw", "gru", "bert", "mobilenet_v2_transfer_folded"])
def test_pytrains_api_trains_orts_artifacts_with_orts_numbers(case):
    d = os.path.join(MODELS, case)
    ort = np.load(os.path.join(d, "steps.npz"))
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    evaluates = "eval_loss" in ort.files
    module = Module(os.path.join(d, "training_model.onnx"), state,
                    os.path.join(d, "eval_model.onnx") if evaluates else None)
    optimizer = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(float(ort["lr"]) if "lr" in ort.files else 0.01)
    names = [k.split("/", 1)[1] for k in ort.files if k.startswith(("param/", "last/"))]
    assert sorted(module.trainable_names) == sorted(names)
    xs = _batches(ort)
    losses = []
    for step, y in enumerate(ort["y"]):
        losses.append(float(np.asarray(module(*[x[step] for x in xs], y)).reshape(())))
        optimizer.step()
        module.lazy_reset_grad()
    np.testing.assert_allclose(losses, ort["loss"], rtol=1e-4)
    for p in names:
        theirs = ort["param/" + p][-1] if "param/" + p in ort.files else ort["last/" + p]
        if case == "bert" and p.endswith("attention.self.key.bias"):
            continue  # gradient 0 in exact arithmetic: rounding noise (test_ort_made_models.py checks its band)
        np.testing.assert_allclose(state.parameters[p].data, theirs, rtol=1e-4,
                                   atol=max(1e-6, 1e-4 * np.abs(theirs).max()), err_msg=p)
    assert state.optimizer_state.step == 10
    if evaluates:
        module.eval()
        np.testing.assert_allclose(float(np.asarray(module(*[x[-1] for x in xs], ort["y"][-1])).reshape(())),
                                   float(ort["eval_loss"]), rtol=1e-4)


def test_pytrains_api_refuses_an_orts_optimizer_node_it_cannot_mean(tmp_path):
    """ORT's AdamWOptimizer refuses adam_mode 0 without bias correction; so does pytrain, naming the
    node's attributes and the way out."""
    d = os.path.join(MODELS, "mlp_adamw")
    with open(os.path.join(d, "optimizer_model.onnx"), "rb") as f:
        model = ModelProto.FromString(f.read())
    (node,) = model.graph.node
    node.attribute[:] = [a for a in node.attribute if a.name not in ("adam_mode", "correct_bias")] + \
        [make_attribute("adam_mode", 0), make_attribute("correct_bias", 0)]
    path = str(tmp_path / "optimizer_model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    module = Module(os.path.join(d, "training_model.onnx"), state)
    with pytest.raises(ModelFormatError, match="AdamWOptimizer node has adam_mode=0, correct_bias=0") as e:
        Optimizer(path, module)
    assert "pytrain.ort.artifacts.generate_artifacts" in str(e.value)


PY38_SCRIPT = r"""
import os, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.device.api import CheckpointState, Module, Optimizer
out = {}
for d in sys.argv[3:]:
    ort = np.load(os.path.join(d, "steps.npz"))
    state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
    module = Module(os.path.join(d, "training_model.onnx"), state)
    opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
    opt.set_learning_rate(float(ort["lr"]) if "lr" in ort.files else 0.01)
    names = ["x"] if "x" in ort.files else sorted(k for k in ort.files if k[0] == "x" and k[1:].isdigit())
    xs = [ort[k].astype(np.float32) if ort[k].dtype == np.float16 else ort[k] for k in names]
    losses = []
    for s in range(len(ort["y"])):
        losses.append(float(np.asarray(module(*[x[s] for x in xs], ort["y"][s])).reshape(())))
        opt.step()
        module.lazy_reset_grad()
    out[os.path.basename(d)] = np.array(losses)
np.savez(sys.argv[2], numpy_version=np.__version__, **out)
"""


def test_orts_artifacts_train_on_python38_numpy117(py38, tmp_path):
    """The browser's Python (3.8, numpy 1.17.5) trains ORT's files with ORT's losses too: the new
    ORT kernels (recurrent, Gelu, Tanh, Split) and the reader included."""
    import subprocess
    from pathlib import Path

    cases = ["cnn_adamw", "gru", "lstm", "bert", "resnet", "multihead_attention"]
    script = tmp_path / "run.py"
    script.write_text(PY38_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([str(py38), str(script), root, str(tmp_path / "out.npz")] +
                   [os.path.join(MODELS, c) for c in cases], check=True)
    out = np.load(str(tmp_path / "out.npz"))
    assert str(out["numpy_version"]) == "1.17.5"
    for c in cases:
        np.testing.assert_allclose(out[c], np.load(os.path.join(MODELS, c, "steps.npz"))["loss"], rtol=1e-4,
                                   err_msg=c)
