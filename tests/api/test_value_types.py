"""Sequence, optional, map and sparse values are refused when a model is loaded or artifacts are
generated, naming the value or node and its type: never run with a wrong meaning
(an Identity on a sequence used to stack it into one tensor)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytrain.generator import artifacts
from pytrain.errors import UnsupportedOpError
from pytrain.proto import ModelProto
from pytrain.engine.validate import load_model
from pytrain.engine.runtime import InferenceSession


def _model(nodes, inputs, outputs, inits=(), value_info=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _seq(name):
    return helper.make_tensor_sequence_value_info(name, TensorProto.FLOAT, None)


def _t(name, shape=None):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


W = numpy_helper.from_array(np.ones((3, 3), np.float32), "W")

CASES = {
    "sequence input to Identity": (
        _model([helper.make_node("Identity", ["s"], ["y"], name="ident")], [_seq("s")], [_seq("y")]),
        r"input 's' has type sequence\(tensor\(float32\)\)"),
    "SequenceConstruct node": (
        _model([helper.make_node("MatMul", ["x", "W"], ["a"]),
                helper.make_node("SequenceConstruct", ["a", "a"], ["s"], name="make_seq"),
                helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, name="cat")],
               [_t("x", [2, 3])], [_t("y")], [W]),
        r"node 'make_seq' \(SequenceConstruct\)"),
    "SplitToSequence node": (
        _model([helper.make_node("SplitToSequence", ["x"], ["s"], name="split"),
                helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")],
               [_t("x", [2, 3])], [_t("y")], [numpy_helper.from_array(np.array(0, np.int64), "i")]),
        r"node 'split' \(SplitToSequence\)"),
    "optional value_info": (
        _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [_t("x", [2, 3])], [_t("y")], [W],
               value_info=[helper.make_value_info("y", helper.make_optional_type_proto(
                   helper.make_tensor_type_proto(TensorProto.FLOAT, None)))]),
        r"value_info 'y' has type optional\(tensor\(float32\)\)"),
    "Optional node": (
        _model([helper.make_node("Optional", ["x"], ["o"], name="opt"),
                helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")],
               [_t("x", [2, 3])], [_t("y")], opset=18),
        r"node 'opt' \(Optional\)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_at_load_and_generate(case):
    model, message = CASES[case]
    data = model.SerializeToString()
    with pytest.raises(UnsupportedOpError, match=message):
        load_model(data)
    with pytest.raises(UnsupportedOpError, match=message):
        load_model(ModelProto.FromString(data))
    with pytest.raises(UnsupportedOpError, match=message):
        artifacts.generate_artifacts(data)
    with pytest.raises(UnsupportedOpError, match=message):
        InferenceSession(model)


def test_tensor_models_still_load():
    model = _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [_t("x", [2, 3])], [_t("y", [2, 3])], [W])
    y = InferenceSession(model.SerializeToString()).run(None, {"x": np.ones((2, 3), np.float32)})[0]
    np.testing.assert_array_equal(y, np.full((2, 3), 3, np.float32))
