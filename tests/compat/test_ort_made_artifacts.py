"""What ONNX Runtime 1.19.2 itself made: its checkpoints in ``pytrain inspect``. (Its training,
eval and optimizer models train in pytrain.ort: tests/compat/test_ort_made_models.py.)

The fixtures (tests/compat/fixtures/ort_checkpoints/) come from the make_fixtures.py script next to
them, run in the onnxruntime-training-cpu 1.19.2 venv.
"""
from __future__ import annotations

import os

from pytrain.cli import main

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


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
