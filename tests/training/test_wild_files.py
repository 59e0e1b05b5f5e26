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
