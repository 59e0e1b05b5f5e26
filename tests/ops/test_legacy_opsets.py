"""Old opsets' forms whose inputs were once attributes, with their opset's meaning: Slice-1 (starts/ends/axes
attributes) and Pad-1/2 (paddings/pads and value attributes, every mode), against onnx.reference and
onnxruntime, through the validating runtime as a user loads a file."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import check

X = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("attrs", [dict(starts=[1, -3], ends=[100, -1], axes=[1, 3]),
                                   dict(starts=[0, 1], ends=[1, 3]),  # axes default: the first ones
                                   dict(starts=[-2], ends=[-100], axes=[2])])  # empty
def test_slice_1_attributes(attrs):
    for oracle in ("ref", "ort"):
        check("Slice", [X], attrs, opset=9, oracle=oracle)


@pytest.mark.parametrize("mode,value", [("constant", 1.5), ("constant", None), ("reflect", None), ("edge", None)])
def test_pad_2_attributes(mode, value):
    attrs = dict(pads=[0, 1, 2, 0, 0, 2, 1, 1], mode=mode)
    if value is not None:
        attrs["value"] = value
    for oracle in ("ref", "ort"):
        check("Pad", [X], attrs, opset=2 if oracle == "ort" else 10, oracle=oracle)


def test_pad_1_paddings_attribute():
    check("Pad", [X], dict(paddings=[0, 0, 1, 1, 0, 0, 1, 1], value=-2.0), opset=1, oracle="ref")


def test_an_attribute_of_an_older_opset_is_refused():
    from ops_oracle import run_pytrain
    from pytrain.errors import PytrainError

    with pytest.raises(PytrainError, match="pads is Pad-1/2's"):
        run_pytrain("Pad", [X], dict(pads=[0, 0, 1, 1, 0, 0, 1, 1]), opset=11)
    with pytest.raises(PytrainError, match="starts is Slice-1's"):
        run_pytrain("Slice", [X], dict(starts=[1], ends=[2]), opset=13)
