"""What converters write into pretrained ONNX files (issue 32), trained: Softmax/LogSoftmax of opsets
before 13 on non-last axes, ``-1`` and ``?`` dims, weights stored as Constant nodes or behind
Identity/Cast, control flow. Each model: inference equals onnxruntime, 5 SGD steps equal the same
function in torch, the export runs in onnxruntime with pytrain's outputs (tests/helpers/wild_models.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnx import helper  # noqa: E402
from wild_models import FLOAT, INT64, batches, check_wild, model, weights  # noqa: E402

N_IN, N_CLS = 6, 5


def _coerced(fn, x, axis):
    """The opset < 13 meaning: ``fn`` over everything from ``axis`` on, as one row."""
    return fn(x.reshape(*x.shape[:axis], -1), -1).reshape(x.shape)


def _softmax_model(opset: int):
    p = weights({"W1": (N_IN, 24), "b1": (24,), "W2": (24, N_CLS)})
    shapes = {"s3": np.array([-1, 4, 6], np.int64), "s4": np.array([-1, 2, 3, 4], np.int64),
              "s2": np.array([-1, 24], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Reshape", ["h1", "s3"], ["h2"]),
             helper.make_node("Softmax", ["h2"], ["h3"], axis=1),
             helper.make_node("Reshape", ["h3", "s4"], ["h4"]),
             helper.make_node("LogSoftmax", ["h4"], ["h5"], axis=2),
             helper.make_node("Reshape", ["h5", "s2"], ["h6"]),
             helper.make_node("MatMul", ["h6", "W2"], ["logits"])]
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], dict(p, **shapes), opset)
    old = opset < 13

    def forward(ps, x):
        h = (x @ ps["W1"] + ps["b1"]).reshape(-1, 4, 6)
        h = _coerced(torch.softmax, h, 1) if old else torch.softmax(h, 1)
        h = h.reshape(-1, 2, 3, 4)
        h = _coerced(torch.log_softmax, h, 2) if old else torch.log_softmax(h, 2)
        return h.reshape(-1, 24) @ ps["W2"]

    return m, forward, p


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
def test_softmax_family_on_non_last_axes_trains_with_its_opsets_meaning(opset):
    m, forward, p = _softmax_model(opset)
    check_wild(m, forward, p, batches(N_IN, N_CLS))


def _converter_model(opset: int = 11):
    """As paddle2onnx / older tf2onnx write a CNN: batch ``-1``, height and width both ``?``, the conv
    weight a Constant node, the classifier's weight behind Identity and its bias a float64 initializer
    behind Cast."""
    p = weights({"conv.w": (4, 1, 3, 3), "fc.w": (4, N_CLS)})
    p["fc.b"] = np.random.default_rng(3).standard_normal(N_CLS)  # float64, cast to float in the graph
    w = helper.make_tensor("conv.w", FLOAT, p["conv.w"].shape, p["conv.w"].ravel())
    nodes = [helper.make_node("Constant", [], ["conv.w"], value=w),
             helper.make_node("Conv", ["x", "conv.w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Identity", ["fc.w"], ["fc.w_copy"]),
             helper.make_node("Cast", ["fc.b"], ["fc.b_f"], to=FLOAT),
             helper.make_node("Gemm", ["f", "fc.w_copy", "fc.b_f"], ["logits"])]
    m = model(nodes, [("x", FLOAT, [-1, 1, "?", "?"])], [("logits", FLOAT, [-1, N_CLS])],
              {"fc.w": p["fc.w"], "fc.b": p["fc.b"]}, opset)

    def forward(ps, x):
        h = torch.relu(torch.nn.functional.conv2d(x, ps["conv.w"], padding=1)).mean(dim=(2, 3))
        return h @ ps["fc.w"] + ps["fc.b"].float()

    return m, forward, p


def test_converter_dims_and_weights_stored_as_nodes_train():
    m, forward, p = _converter_model()
    exported = check_wild(m, forward, p, batches((1, 6, 9), N_CLS))  # height 6 and width 9, both named '?'
    assert "conv.w" in [t.name for t in exported.graph.initializer]  # the Constant node exports as an initializer
    assert "Constant" not in [n.op_type for n in exported.graph.node]


def test_nothing_trains_says_why():
    from pytrain import artifacts
    from pytrain.errors import ArtifactError

    m = model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Reshape", ["y", "s"], ["logits"])],
              [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_IN])],
              {"s": np.array([-1, N_IN], np.int64)}, 13)
    with pytest.raises(ArtifactError, match=r"no parameter would train.*'s': not a float tensor"):
        artifacts.generate_artifacts(m.SerializeToString())
