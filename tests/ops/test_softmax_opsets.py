"""Softmax, LogSoftmax and Hardmax with every opset's meaning: before 13 the input is coerced to 2-D
at ``axis`` (default 1), from 13 one axis (default -1); pytrain against onnx.reference and onnxruntime
on non-last axes, through the validating runtime as a user loads a file."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import assert_same, check, make_model, run_ort
from pytrain.engine.runtime import InferenceSession

OPS = ("Softmax", "LogSoftmax", "Hardmax")
X = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
X[0, 1, 2, :2] = 7.0  # ties: Hardmax takes the first maximum


# negative axes exist from opset 11: opset 7 takes the non-negative ones only
OPSET_AXES = [(opset, axis) for opset in (7, 11, 12, 13, 17) for axis in (None, 0, 1, 2, 3, -1, -3)
              if opset >= 11 or axis is None or axis >= 0]


@pytest.mark.parametrize("opset,axis", OPSET_AXES)
@pytest.mark.parametrize("op", OPS)
def test_kernel_means_the_models_opset(op, axis, opset):
    attrs = {} if axis is None else {"axis": axis}
    if opset >= 13:  # onnx.reference implements only the single-axis meaning (its Softmax-11 is Softmax-13's)
        check(op, [X], attrs, opset=opset, oracle="ref")
    check(op, [X], attrs, opset=opset, oracle="ort", rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_old_opset_file_loads_and_runs(opset):
    """The validating loader no longer refuses Softmax-11: the whole file runs with its opset's meaning."""
    model = make_model("Softmax", [X], {"axis": 1}, opset=opset)
    got = InferenceSession(model.SerializeToString()).run(None, {"in0": X})[0]
    assert_same(got, run_ort("Softmax", [X], {"axis": 1}, opset=opset)[0], rtol=1e-5, atol=1e-6)


def test_docs_say_for_every_op_which_opsets_pytrain_implements():
    """docs/ops.md has a row for every standard op pytrain runs, with its ONNX schema versions."""
    from pathlib import Path

    from pytrain.base.opset_versions import SCHEMA_VERSIONS
    from pytrain.ops import supported_ops

    text = (Path(__file__).resolve().parents[2] / "docs" / "ops.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines()
            if line.startswith("| ") and line.count("|") >= 5}
    for op in supported_ops():
        assert op in rows, op
        assert rows[op] == ", ".join(str(v) for v in SCHEMA_VERSIONS[op]), op
