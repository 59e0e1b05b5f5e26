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
