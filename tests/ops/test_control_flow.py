"""If, Loop and Scan in inference: bodies reading the outer graph's values (weights, the input, values
computed before the node), nested bodies, carried state and scan outputs on any axis and direction,
against onnxruntime (onnx.reference where it implements the case: its Loop stacks with vstack and its
Scan takes only axis 0, forward)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from pytrain.errors import PytrainError
from pytrain.engine.runtime import InferenceSession

F = T.FLOAT
V = h.make_tensor_value_info


def _ort(m: onnx.ModelProto, feeds):
    import onnxruntime as ort
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _model(nodes, outputs, inits, opset=17):
    g = h.make_graph(nodes, "g", [V("x", F, [3, 4])], [V(o, F, None) for o in outputs],
                     [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _bodies():
    then = h.make_graph([h.make_node("Mul", ["x", "w"], ["t"])], "then", [], [V("t", F, None)])
    other = h.make_graph([h.make_node("Add", ["x", "w"], ["e"])], "else", [], [V("e", F, None)])
    loop = h.make_graph([h.make_node("Add", ["acc", "x"], ["acc2"]), h.make_node("Identity", ["c"], ["c2"]),
                         h.make_node("Mul", ["acc2", "w"], ["so"])], "loop",
                        [V("i", T.INT64, []), V("c", T.BOOL, []), V("acc", F, None)],
                        [V("c2", T.BOOL, []), V("acc2", F, None), V("so", F, None)])
    scan = h.make_graph([h.make_node("Add", ["s", "xt"], ["s2"]), h.make_node("Mul", ["s2", "w"], ["o"])], "scan",
                        [V("s", F, None), V("xt", F, None)], [V("s2", F, None), V("o", F, None)])
    return then, other, loop, scan


INITS = {"w": np.arange(4, dtype=np.float32), "zero": np.float32(0), "trip": np.int64(3), "true": np.array(True)}


@pytest.mark.parametrize("out_axis,direction", [(0, 0), (1, 0), (1, 1), (-1, 1)])
def test_if_loop_scan_read_the_outer_graph(out_axis, direction):
    then, other, loop, scan = _bodies()
    nodes = [h.make_node("ReduceSum", ["x"], ["sx"], keepdims=0), h.make_node("Greater", ["sx", "zero"], ["cond"]),
             h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
             h.make_node("Loop", ["trip", "true", "y"], ["accf", "scans"], body=loop),
             h.make_node("Scan", ["y", "x"], ["sf", "souts"], body=scan, num_scan_inputs=1,
                         scan_output_axes=[out_axis], scan_input_directions=[direction],
                         scan_output_directions=[direction])]
    m = _model(nodes, ["y", "accf", "scans", "sf", "souts"], INITS)
    for x in (np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), -np.ones((3, 4), np.float32)):
        got = InferenceSession(m.SerializeToString()).run(None, {"x": x})
        for k, (a, b) in enumerate(zip(got, _ort(m, {"x": x}))):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg="output %d" % k)


def test_loop_stops_on_its_condition_and_nests():
    """A Loop without a trip count runs until its body says stop; an If inside reads the Loop's outer scope."""
    inner_then = h.make_graph([h.make_node("Add", ["v", "w"], ["r"])], "it", [], [V("r", F, None)])
    inner_else = h.make_graph([h.make_node("Sub", ["v", "w"], ["r2"])], "ie", [], [V("r2", F, None)])
    body = h.make_graph([h.make_node("Less", ["limit", "i"], ["go"]),  # add w after 2 rounds, subtract before
                         h.make_node("If", ["go"], ["v2"], then_branch=inner_then, else_branch=inner_else),
                         h.make_node("ReduceSum", ["v2"], ["total"], keepdims=0),
                         h.make_node("Less", ["total", "cap"], ["c2"])], "body",  # stop when the total reaches cap
                        [V("i", T.INT64, []), V("c", T.BOOL, []), V("v", F, None)],
                        [V("c2", T.BOOL, []), V("v2", F, None)])
    m = _model([h.make_node("Loop", ["", "true", "x"], ["out"], body=body)], ["out"],
               dict(w=np.arange(4, dtype=np.float32), true=np.array(True), limit=np.int64(2),
                    cap=np.float32(200)))
    x = np.ones((3, 4), np.float32)
    got = InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, _ort(m, {"x": x})[0], rtol=1e-6)
    from onnx.reference import ReferenceEvaluator
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-6)


def test_scan_8_batch_axis():
    body = h.make_graph([h.make_node("Add", ["s", "xt"], ["s2"]), h.make_node("Identity", ["s2"], ["o"])], "b",
                        [V("s", F, None), V("xt", F, None)], [V("s2", F, None), V("o", F, None)])
    g = h.make_graph([h.make_node("Scan", ["", "s0", "x"], ["sf", "outs"], body=body, num_scan_inputs=1)], "g",
                     [V("s0", F, [2, 3]), V("x", F, [2, 4, 3])], [V("sf", F, None), V("outs", F, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 8)])
    m.ir_version = 4
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal((2, 3)).astype(np.float32), "x": rng.standard_normal((2, 4, 3)).astype(np.float32)}
    got = InferenceSession(m.SerializeToString()).run(None, feeds)
    for a, b in zip(got, _ort(m, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_if_with_a_condition_of_two_elements_is_refused():
    then, other, _, _ = _bodies()
    m = _model([h.make_node("If", ["c2"], ["y"], then_branch=then, else_branch=other)], ["y"],
               dict(INITS, c2=np.array([True, False])))
    with pytest.raises(PytrainError, match="condition must hold one element"):
        InferenceSession(m.SerializeToString()).run(None, {"x": np.ones((3, 4), np.float32)})
