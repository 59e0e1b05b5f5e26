"""The executor's compiled plan: outputs, early frees, and errors that name the node."""
from __future__ import annotations

import weakref

import numpy as np
import pytest

from pytrain.errors import KernelError, PytrainError
from pytrain.engine.executor import Plan
from pytrain.ops import registry
from pytrain.proto import make_graph, make_node, make_value_info


def _relu_chain(n: int):
    nodes = [make_node("Relu", ["t%d" % i], ["t%d" % (i + 1)], name="relu%d" % i) for i in range(n)]
    return make_graph(nodes, "chain", [make_value_info("t0", 1, [2, 3])], [make_value_info("t%d" % n, 1, [2, 3])])


def test_outputs_and_intermediates_freed_after_their_last_reader():
    made, alive_at_call = [], []

    def tracking_relu(ctx, X):
        # when node k runs, every intermediate before its input must already be gone
        alive_at_call.append([r() is not None for r in made[:-1]])
        y = np.maximum(X, 0)
        made.append(weakref.ref(y))
        return (y,)

    registry.accelerate("Relu", tracking_relu)
    try:
        plan = Plan(_relu_chain(4), ["t0"], ["t4", "t2"], opset=17)
        x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
        out, mid = plan.run([x])
    finally:
        registry.accelerate("Relu", None)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert mid is not None  # t2 is asked for, so it is kept
    # node 3 reads t2 (kept: an output) and node 2 ran after t1's last reader: t1 is gone by then
    assert alive_at_call[2] == [False]
    assert alive_at_call[3] == [False, True]


def test_errors_name_the_node_and_what_it_got():
    plan = Plan(make_graph([make_node("MatMul", ["a", "b"], ["c"], name="mm")], "g",
                           [make_value_info("a", 1, None), make_value_info("b", 1, None)],
                           [make_value_info("c", 1, None)]), ["a", "b"], ["c"], opset=17)
    with pytest.raises(PytrainError, match="node 'mm'|node mm"):
        plan.run([np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)])

    def broken(ctx, X):
        raise ValueError("deep inside numpy")

    registry.accelerate("Relu", broken)
    try:
        plan = Plan(_relu_chain(2), ["t0"], ["t2"], opset=17)
        with pytest.raises(KernelError, match=r"relu0.*failed on inputs float32\[2, 3\]: ValueError: deep inside"):
            plan.run([np.zeros((2, 3), np.float32)])
    finally:
        registry.accelerate("Relu", None)
    with pytest.raises(PytrainError, match="takes 1 feeds \\(t0\\), got 2"):
        plan.run([np.zeros((2, 3), np.float32)] * 2)


def _shape_chain_graph(bad_axes: bool = False):
    """x reshaped by Concat(Unsqueeze(Constant 2), Unsqueeze(Constant 3)) (an exporter's shape chain)."""
    from pytrain.proto import from_array

    nodes = [make_node("Constant", [], ["two"], name="c2", value=from_array(np.array(2, np.int64))),
             make_node("Constant", [], ["three"], name="c3", value=from_array(np.array(3, np.int64))),
             make_node("Unsqueeze", ["two", "axes"], ["u2"], name="u2"),
             make_node("Unsqueeze", ["three", "axes"], ["u3"], name="u3"),
             make_node("Concat", ["u2", "u3"], ["shape"], name="cat", axis=0),
             make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    axes = from_array(np.array([5 if bad_axes else 0], np.int64), "axes")
    return make_graph(nodes, "g", [make_value_info("x", 1, [6])], [make_value_info("y", 1, [2, 3])], [axes])


def test_nodes_of_constants_alone_run_once_when_the_plan_is_made():
    plan = Plan(_shape_chain_graph(), ["x"], ["y"], opset=17)
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(plan.run([x])[0], x.reshape(2, 3))
    calls = {}
    plan.time_nodes(calls, lambda n: n.op_type)
    plan.run([x])
    assert sorted(calls) == ["Reshape"]   # the shape chain was folded into the plan
    assert sorted(plan.constants) == ["axes"]   # the folded tensors are not the model's constants


def test_a_constant_node_that_fails_still_fails_when_run_naming_the_node():
    plan = Plan(_shape_chain_graph(bad_axes=True), ["x"], ["y"], opset=17)
    with pytest.raises(PytrainError, match="u2"):
        plan.run([np.arange(6, dtype=np.float32)])


def _weight_relayout_graph(rows: int):
    """y = x @ Concat(Slice(W, rows/2:), Slice(W, :rows/2))^T[..] : an exporter's gate reordering of a weight."""
    from pytrain.proto import from_array

    half = rows // 2
    w = RNG_W.standard_normal((rows, 96)).astype(np.float32)
    inits = [from_array(w, "W"), from_array(np.array([0], np.int64), "z"), from_array(np.array([half], np.int64), "h"),
             from_array(np.array([rows], np.int64), "e"), from_array(np.array([0], np.int64), "ax")]
    nodes = [make_node("Slice", ["W", "h", "e", "ax"], ["top"], name="s1"),
             make_node("Slice", ["W", "z", "h", "ax"], ["bottom"], name="s2"),
             make_node("Concat", ["top", "bottom"], ["wr"], name="cat", axis=0),
             make_node("Transpose", ["wr"], ["wt"], name="tr", perm=[1, 0]),
             make_node("MatMul", ["x", "wt"], ["y"], name="mm")]
    graph = make_graph(nodes, "g", [make_value_info("x", 1, [3, 96])], [make_value_info("y", 1, [3, rows])], inits)
    return graph, w


RNG_W = np.random.default_rng(32)


@pytest.mark.parametrize("rows, folded", [(256, True), (2 * 65536 // 96 + 2, False)])
def test_a_weights_relayout_is_folded_up_to_its_limit(rows, folded):
    graph, w = _weight_relayout_graph(rows)
    plan = Plan(graph, ["x"], ["y"], opset=17)
    x = RNG_W.standard_normal((3, 96)).astype(np.float32)
    half = rows // 2
    want = x @ np.concatenate([w[half:], w[:half]]).T
    np.testing.assert_array_equal(plan.run([x])[0], want)
    calls = {}
    plan.time_nodes(calls, lambda n: n.op_type)
    plan.run([x])
    assert sorted(calls) == (["MatMul"] if folded else ["Concat", "MatMul", "Slice", "Transpose"])
    assert sorted(plan.constants) == ["W", "ax", "e", "h", "z"]   # (the folded tensors are not the model's)
