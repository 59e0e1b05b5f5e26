"""What ONNX Runtime 1.19.2 itself made: its checkpoints in ``pytrain inspect``, and its training and
optimizer models refused with the ops named and the way out.

The fixtures (tests/compat/fixtures/ort_training/ort_made/, continued.ckpt; ort_checkpoints/) come
from the make_fixtures.py scripts next to them, run in the onnxruntime-training-cpu 1.19.2 venv.
"""
from __future__ import annotations

import os

import pytest

from pytrain.cli import main
from pytrain.errors import ModelFormatError
from pytrain.ort import artifacts
from pytrain.ort.api import CheckpointState, Module, Optimizer

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
MADE = os.path.join(FIXTURES, "ort_training", "ort_made")
WAY_OUT = "regenerate the artifacts from the inference model with pytrain.ort.artifacts.generate_artifacts"


def _state():
    return CheckpointState.load_checkpoint(os.path.join(FIXTURES, "ort_training", "continued.ckpt"))


def test_orts_training_model_is_refused_naming_its_ops_and_the_way_out():
    with pytest.raises(ModelFormatError) as e:
        Module(os.path.join(MADE, "training_model.onnx"), _state(), os.path.join(MADE, "eval_model.onnx"))
    msg = str(e.value)
    assert "training model was made by ONNX Runtime's generate_artifacts" in msg
    for op in ("com.microsoft:InPlaceAccumulatorV2", "com.microsoft:ReluGrad",
               "com.microsoft:SoftmaxCrossEntropyLossGrad"):
        assert op in msg
    assert "(node 'Relu_Grad/ReluGrad_0')" in msg and WAY_OUT in msg


def test_orts_optimizer_model_is_refused_naming_its_op_and_the_way_out(tmp_path):
    artifacts.generate_artifacts(os.path.join(FIXTURES, "ort_training", "model.onnx"),
                                 requires_grad=["fc1.weight", "fc1.bias", "fc2.weight"], frozen_params=["fc2.bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, artifact_directory=str(tmp_path))
    module = Module(str(tmp_path / "training_model.onnx"), _state())
    with open(os.path.join(MADE, "optimizer_model.onnx"), "rb") as f:
        data = f.read()
    for given in (os.path.join(MADE, "optimizer_model.onnx"), data):
        with pytest.raises(ModelFormatError) as e:
            Optimizer(given, module)
        msg = str(e.value)
        assert "optimizer model was made by ONNX Runtime's generate_artifacts" in msg
        assert "com.microsoft:AdamWOptimizer" in msg and "'params'" in msg and "sequences of tensors" in msg
        assert WAY_OUT in msg


def _inspect(capsys, path):
    code = main(["inspect", path])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_inspect_reads_orts_checkpoint(capsys):
    out = _inspect(capsys, os.path.join(FIXTURES, "ort_checkpoints", "optimizer.ckpt"))
    assert out.startswith("ONNX Runtime checkpoint ")
    assert "parameters: 4 tensors, 23 values (21 trainable in 3 tensors)" in out
    assert "optimizer state: step 2, learning rate 0.001" in out and "exp_avg, exp_avg_sq for 3 parameters" in out
    lines = out.splitlines()
    assert any(line.split()[:4] == ["fc1.weight", "float32", "[3,", "4]"] and line.split()[-1] == "trains"
               for line in lines)
    assert any(line.split()[0] == "fc2.bias" and line.split()[-1] == "frozen" for line in lines)
    assert "note = 'from onnxruntime 1.19.2'" in out and "epoch = 7" in out


def test_inspect_reads_orts_nominal_checkpoint(capsys):
    out = _inspect(capsys, os.path.join(FIXTURES, "ort_checkpoints", "nominal.ckpt"))
    assert "parameters: 4 tensors (3 trainable), nominal (names only" in out
    assert "optimizer state: none" in out
