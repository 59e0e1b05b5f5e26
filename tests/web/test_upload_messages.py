"""What the page's Python says about an uploaded model, in words for people: the ops it cannot run
(named, not the list of every op; at inspect and at Generate alike) and the external data file
to choose with the model (no Python argument names)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from pytrain.errors import ModelFormatError, UnsupportedOpError  # noqa: E402
from pytrain.webapp.session import Session  # noqa: E402


def _model(op: str = "MatMul") -> "onnx.ModelProto":
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    nodes = [helper.make_node("MatMul", ["input", "W"], ["h"]),
             helper.make_node(op, ["h"], ["output"]) if op != "MatMul" else helper.make_node("Relu", ["h"], ["output"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("where", ["inspect", "generate"])
def test_unsupported_ops_are_named_alone(where):
    blob = _model("Unique").SerializeToString()
    with pytest.raises(UnsupportedOpError) as e:
        if where == "inspect":
            Session.inspect_model(blob, "odd.onnx")
        else:
            Session().generate(blob, requires_grad=["W"], name="odd.onnx")
    msg = str(e.value)
    assert "odd.onnx" in msg and "Unique" in msg and "Abs" not in msg and len(msg) < 200, msg


def test_missing_external_data_says_which_file_to_choose(tmp_path):
    path = tmp_path / "small_cnn.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, location="small_cnn.onnx.data", size_threshold=0)
    with pytest.raises(ModelFormatError) as e:
        Session.inspect_model(path.read_bytes(), "small_cnn.onnx")
    msg = str(e.value)
    assert "also choose small_cnn.onnx.data in the same dialog" in msg and "external_data" not in msg, msg
    extra = {"small_cnn.onnx.data": (tmp_path / "small_cnn.onnx.data").read_bytes()}
    assert Session.inspect_model(path.read_bytes(), "small_cnn.onnx", extra)["params"][0]["layer"] == 1


def test_inspect_sees_the_ops_inside_control_flow_bodies():
    """An If's branches are part of the model: their ops are listed, and an op pytrain lacks there is named."""
    from onnx import TensorProto, helper

    def with_branch_op(op: str) -> bytes:
        m = _model()
        V = helper.make_tensor_value_info
        then = helper.make_graph([helper.make_node(op, ["h"], ["t"])], "then", [], [V("t", TensorProto.FLOAT, None)])
        other = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [], [V("e", TensorProto.FLOAT, None)])
        m.graph.node[1].CopyFrom(helper.make_node("If", ["c"], ["output"], then_branch=then, else_branch=other))
        m.graph.input.append(V("c", TensorProto.BOOL, []))
        return m.SerializeToString()

    assert {"If", "Sigmoid", "Neg"} <= set(Session.inspect_model(with_branch_op("Sigmoid"), "branchy.onnx")["ops"])
    with pytest.raises(UnsupportedOpError, match="Unique"):
        Session.inspect_model(with_branch_op("Unique"), "branchy.onnx")
