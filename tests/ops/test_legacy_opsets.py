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


# ---- opset 1-6 broadcasting: B matched to A's dims from `axis` (onnxruntime implements these ops from
# opset 7 and onnx.reference not at all: the oracle is the spec's own list of shapes, in numpy) ----------
def _run(op: str, a: np.ndarray, b: np.ndarray, attrs, opset: int = 6) -> np.ndarray:
    """The one-node model through the runtime: its plan aligns B (pytrain/engine/legacy_forms.py)."""
    from ops_oracle import make_model
    from pytrain.engine.runtime import InferenceSession

    blob = make_model(op, [a, b], attrs, opset=opset).SerializeToString()
    return InferenceSession(blob).run(None, {"in0": a, "in1": b})[0]


def _legacy(op: str, b: np.ndarray, **attrs):
    return _run(op, X, b, attrs)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply),
                                   ("Div", np.divide), ("Pow", np.power)])
def test_legacy_broadcast_follows_the_specs_shapes(op, fn):
    rng = np.random.default_rng(1)
    x = np.abs(X) + 0.5 if op == "Pow" else X
    for shape, axis, aligned in [((), None, ()), ((1, 1), None, (1, 1)), ((5,), None, (5,)), ((4, 5), None, (4, 5)),
                                 ((3, 4), 1, (3, 4, 1)), ((2,), 0, (2, 1, 1, 1)), ((4,), -2, (4, 1))]:
        b = (rng.uniform(0.5, 1.5, shape)).astype(np.float32)
        attrs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
        got = _run(op, x, b, attrs)
        np.testing.assert_allclose(got, fn(x, b.reshape(aligned)), rtol=1e-6, err_msg="%s %s axis %s" % (op, shape, axis))


def test_legacy_broadcast_refuses_what_the_spec_does():
    from pytrain.errors import PytrainError

    with pytest.raises(PytrainError, match="must have one shape"):
        _legacy("Add", np.ones(5, np.float32), broadcast=0)
    with pytest.raises(PytrainError, match="does not match A's dims"):
        _legacy("Mul", np.ones(3, np.float32), broadcast=1, axis=2)
    with pytest.raises(PytrainError, match="before opset 7"):
        _run("Add", X, np.ones(5, np.float32), {"broadcast": 1}, opset=7)


def test_no_arithmetic_kernel_takes_the_old_attributes():
    """The alignment is the plan's: Add..Pow's kernels take no attribute, and refuse one called directly."""
    from ops_oracle import run_pytrain

    for op in ("Add", "Sub", "Mul", "Div", "Pow"):
        with pytest.raises(TypeError):
            run_pytrain(op, [X, np.ones(5, np.float32)], {"broadcast": 1}, opset=6)


def _gemm(c: np.ndarray, opset: int = 6, **attrs) -> np.ndarray:
    from ops_oracle import make_model
    from pytrain.engine.runtime import InferenceSession

    a, b = X.reshape(6, 20)[:, :4], X.reshape(20, 6)[:4, :5]
    blob = make_model("Gemm", [a, b, c], dict(attrs, beta=0.5), opset=opset).SerializeToString()
    got = InferenceSession(blob).run(None, {"in0": a, "in1": b, "in2": c})[0]
    np.testing.assert_allclose(got, a @ b + 0.5 * c, rtol=1e-5, atol=1e-6)
    return got


def test_gemm_6_broadcasts_c_only_when_asked():
    """Gemm-1/6: C of the output's shape, or broadcast with broadcast=1 (a plan makes it Gemm-7)."""
    from pytrain.errors import PytrainError

    full, row = np.ones((6, 5), np.float32) * 2, np.arange(5, dtype=np.float32)
    _gemm(full)
    _gemm(row, broadcast=1)
    _gemm(row, opset=7)
    with pytest.raises(PytrainError, match="broadcast is not set"):
        _gemm(row)
    with pytest.raises(PytrainError, match="broadcast is not set"):
        _gemm(row, broadcast=0)
