"""``pytrain inspect`` shows the models ONNX Runtime 1.19.2's ``generate_artifacts`` made (fixtures of
tests/compat/fixtures/ort_made_models/): the training model's inputs, parameters and which train, its
ORT ops and how pytrain takes each; the eval model; the optimizer model's update."""
from __future__ import annotations

import os
import shutil

from pytrain.cli import main

MODELS = os.path.join(os.path.dirname(__file__), "..", "compat", "fixtures", "ort_made_models")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(out):
    return [line.split() for line in out.splitlines()]


def test_inspect_shows_orts_training_model(capsys):
    code, out, err = run(capsys, "inspect", os.path.join(MODELS, "gru", "training_model.onnx"))
    assert code == 0 and not err
    assert out.startswith("ONNX Runtime training model ")
    rows = _rows(out)
    assert ["input", "float32", "[4,", "5,", "6]"] in rows and ["labels", "int64", "[4]"] in rows
    assert "parameters: 6 (6 train: ORT accumulates their gradients)" in out
    assert ["head.weight", "float32", "[3,", "10]", "trains"] in rows
    assert ["com.microsoft:GRUTraining", "1", "read", "as", "ONNX", "GRU"] in rows
    assert ["com.microsoft:SplitTraining", "5", "runs"] in rows
    assert ["com.microsoft:InPlaceAccumulatorV2", "6", "read", "as", "the", "gradient", "accumulation"] in rows


def test_inspect_shows_frozen_parameters_of_orts_training_model(capsys):
    code, out, _ = run(capsys, "inspect", os.path.join(MODELS, "cnn_adamw", "training_model.onnx"))
    assert code == 0 and "parameters: 9 (7 train: ORT accumulates their gradients)" in out
    assert ["bn.running_mean", "float32", "[4]", "frozen"] in _rows(out)
    assert ["com.microsoft:BatchNormInternal", "1", "runs"] in _rows(out)
    assert ["ai.onnx:MaxPoolGrad", "1", "read", "as", "pytrain's", "MaxPoolGrad"] in _rows(out)


def test_inspect_shows_orts_eval_and_optimizer_models(capsys):
    code, out, _ = run(capsys, "inspect", os.path.join(MODELS, "bert", "eval_model.onnx"))
    assert code == 0 and out.startswith("ONNX Runtime eval model ")
    rows = _rows(out)
    assert ["input_ids", "int64", "[4,", "8]"] in rows and ["attention_mask", "int64", "[4,", "8]"] in rows
    assert ["hf.classifier.weight", "float32", "[3,", "16]"] in rows
    assert not [r for r in rows if r[-1:] == ["NO:"] or "NO:" in r]
    code, out, _ = run(capsys, "inspect", os.path.join(MODELS, "mlp_sgd", "optimizer_model.onnx"))
    assert code == 0 and out.startswith("ONNX Runtime optimizer model ")
    assert "com.microsoft:SGDOptimizerV2 over every trainable parameter; pytrain runs it as SGDStep(" in out


def test_inspect_names_the_ort_op_pytrain_does_not_run(capsys, tmp_path):
    """Without the checkpoint beside it the inputs are listed as they are; an op pytrain has no kernel
    for is marked, as loading it refuses it."""
    from pytrain.proto import ModelProto

    with open(os.path.join(MODELS, "mlp_adamw", "training_model.onnx"), "rb") as f:
        model = ModelProto.FromString(f.read())
    next(n for n in model.graph.node if n.op_type == "ReluGrad").op_type = "BiasGeluGrad_dX"
    path = tmp_path / "training_model.onnx"
    path.write_bytes(model.SerializeToString())
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0 and "no ONNX Runtime checkpoint beside it" in out
    assert ["com.microsoft:BiasGeluGrad_dX", "1", "NO:", "refused", "when", "loaded"] in _rows(out)
    shutil.copy(os.path.join(MODELS, "mlp_adamw", "checkpoint"), str(tmp_path / "checkpoint"))
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0 and "parameters: 6 (6 train" in out
