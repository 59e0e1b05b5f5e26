"""One forward sweep says which tensors carry a gradient, for the backward graph and for BatchNormalization's
'auto' mode alike: only a node's differentiable outputs carry one. The case where the two sweeps pytrain had
disagreed: a BatchNormalization scale computed from MaxPool's indices (an integer output through which no
gradient flows) does not train, so 'auto' keeps the node on its running statistics; from MaxPool's values it
trains, so 'auto' uses the batch's statistics."""
from __future__ import annotations

from pytrain.autodiff.engine import carried
from pytrain.autodiff.training_forms import batchnorm_modes
from pytrain.proto import make_node


def _graph(scale_from: str):
    return [make_node("MaxPool", ["P"], ["pooled", "indices"], kernel_shape=[2, 2]),
            make_node("Cast", [scale_from], ["scale_4d"], to=1),
            make_node("Reshape", ["scale_4d", "one"], ["S"]),
            make_node("BatchNormalization", ["X", "S", "B", "M", "V"], ["Y"], name="bn")]


def test_indices_carry_no_gradient_and_leave_batchnorm_on_its_running_statistics():
    nodes = _graph("indices")
    got = carried(nodes, ["P"])
    assert "pooled" in got and "indices" not in got and "S" not in got
    assert batchnorm_modes(nodes, "auto", ["P"]) == {3: "eval"}


def test_values_carry_a_gradient_and_train_batchnorm_on_batch_statistics():
    nodes = _graph("pooled")
    assert {"pooled", "scale_4d", "S", "Y"} <= carried(nodes, ["P"])
    assert batchnorm_modes(nodes, "auto", ["P"]) == {3: "train"}
