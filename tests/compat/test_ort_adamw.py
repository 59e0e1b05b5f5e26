"""pytrain.ort's AdamW is ONNX Runtime's: step by step against onnxruntime-training 1.19.2.

tests/compat/fixtures/ort_training/ (make_fixtures.py there, run in the onnxruntime-training-cpu
1.19.2 venv) holds what ORT computed for a 6 -> 8 -> 3 MLP: the losses and parameters of each AdamW
step for ORT's AdamWOptimizer node in adam_mode 1 (Hugging Face's rule, ORT's default) and 0
(PyTorch's), with weight decay and without bias correction; and an ORT checkpoint after 3 steps with
the 3 steps ORT took after it.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from pytrain.generator import artifacts as core_artifacts
from pytrain.errors import ArtifactError
from pytrain.ops import backend
from pytrain.ort import artifacts, onnxblock
from pytrain.ort.api import CheckpointState, Module, Optimizer
from test_ort_made_models import record_steps

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "ort_training")
TRAINABLE = ["fc1.weight", "fc1.bias", "fc2.weight"]
LR = 0.01
#: the fixture's cases as pytrain.ort's onnxblock.optim.AdamW arguments
CASES = {
    "hf_decay": {"adam_mode": 1, "bias_correction": True, "weight_decay": 0.05},
    "torch_decay": {"adam_mode": 0, "bias_correction": True, "weight_decay": 0.05},
    "hf_no_correction": {"adam_mode": 1, "bias_correction": False, "weight_decay": 0.0},
}


@pytest.fixture(scope="module")
def ort():
    return dict(np.load(os.path.join(HERE, "steps.npz")))


def _generate(directory, optimizer) -> None:
    artifacts.generate_artifacts(os.path.join(HERE, "model.onnx"), requires_grad=TRAINABLE, frozen_params=["fc2.bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=optimizer,
                                 artifact_directory=str(directory))


def _train(directory, state, xs, ys):
    module = Module(str(directory / "training_model.onnx"), state, str(directory / "eval_model.onnx"))
    optimizer = Optimizer(str(directory / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    return record_steps(module.train(), optimizer, state, xs, ys, TRAINABLE)


def _assert_on_orts_trajectory(losses, params, ort, key):
    np.testing.assert_allclose(losses, ort[key + "/loss"], rtol=1e-5)
    for p in TRAINABLE:  # every step's parameters, not only the last
        np.testing.assert_allclose(params[p], ort[key + "/" + p], rtol=1e-5, atol=1e-7, err_msg=p)


@pytest.mark.parametrize("case", sorted(CASES))
def test_adamw_step_by_step_as_ort(case, ort, tmp_path):
    _generate(tmp_path, onnxblock.optim.AdamW(**CASES[case]))
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    steps = len(ort[case + "/loss"])
    losses, params = _train(tmp_path, state, ort["x"][:steps], ort["y"][:steps])
    _assert_on_orts_trajectory(losses, params, ort, case)


def test_default_adamw_is_orts_rule_and_differs_from_pytorchs(ort, tmp_path):
    """OptimType.AdamW is ORT's default node (adam_mode 1, no decay); pytrain's own AdamW (PyTorch's
    rule) with ORT's eps, on the same model and data, leaves ORT's trajectory measurably."""
    _generate(tmp_path, artifacts.OptimType.AdamW)
    _, params = _train(tmp_path, CheckpointState.load_checkpoint(str(tmp_path / "checkpoint")),
                       ort["x"][:4], ort["y"][:4])
    torch_rule = tmp_path / "torch_rule"
    _generate(torch_rule, core_artifacts.AdamW(eps=1e-6, weight_decay=0.0))
    _, theirs = _train(torch_rule, CheckpointState.load_checkpoint(str(torch_rule / "checkpoint")),
                       ort["x"][:4], ort["y"][:4])
    gap = max(np.max(np.abs(theirs[p][-1] - params[p][-1])) for p in TRAINABLE)
    assert gap > 1e-4  # the two rules are different numbers, far above float rounding


def test_orts_checkpoint_continues_on_orts_trajectory(ort, tmp_path):
    """ORT trained 3 steps and saved (AdamW moments, step, learning rate); pytrain.ort's next 3 steps
    are ORT's next 3 steps."""
    _generate(tmp_path, artifacts.OptimType.AdamW)
    state = CheckpointState.load_checkpoint(os.path.join(HERE, "continued.ckpt"))
    assert state.core.optimizer_state.step == 3
    # ORT's checkpoint keeps the optimizer's initial learning rate (ORT's own Optimizer reads 1e-3 from
    # it too); ORT's run went on at LR, set again here as there
    assert state.core.optimizer_state.learning_rate == pytest.approx(1e-3)
    losses, params = _train(tmp_path, state, ort["x"][3:6], ort["y"][3:6])
    _assert_on_orts_trajectory(losses, params, ort, "continued")
    assert state.core.optimizer_state.step == 6


def test_pytrains_own_adamw_keeps_pytorchs_rule():
    spec = core_artifacts.AdamW()
    assert spec.op_type == "AdamStep" and spec.eps == 1e-8 and spec.weight_decay == 0.01


def test_orts_refusals_are_kept():
    with pytest.raises(ArtifactError, match="correct_bias should be 1 for adam_mode = 0"):
        onnxblock.optim.AdamW(bias_correction=False, adam_mode=0)
    with pytest.raises(ArtifactError, match="adam_mode must be 0"):
        onnxblock.optim.AdamW(adam_mode=2)


@pytest.mark.parametrize("case", ["hf_decay", "torch_decay"])
def test_browser_fast_path_computes_orts_rule(case, ort, tmp_path):
    """The browser's one-pass Adam kernel computes PyTorch's rule; the ORT update hands it ORT's rule
    rewritten (eps / sqrt(1 - beta2^t), decay after): a numpy stand-in with that contract gives ORT's steps."""
    def torch_adam(groups, lr, t, b1, b2, eps, wd, decoupled):
        for p, g, m, v in groups:
            p *= 1.0 - lr * wd
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
        return True

    previous = backend.use("adam", torch_adam)
    try:
        _generate(tmp_path, onnxblock.optim.AdamW(**CASES[case]))
        steps = len(ort[case + "/loss"])
        losses, params = _train(tmp_path, CheckpointState.load_checkpoint(str(tmp_path / "checkpoint")),
                                ort["x"][:steps], ort["y"][:steps])
    finally:
        backend.use("adam", previous)
    _assert_on_orts_trajectory(losses, params, ort, case)
