"""A feature extractor whose features barely vary across the examples (a randomly initialised
MobileNetV2 in eval mode varies by ~1e-8) would leave the head at chance without a word: the model
description carries a warning in plain words, which the page shows; an extractor whose features
vary gets none."""
from __future__ import annotations

import numpy as np
import pytest

from pytrain import webapp

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _extractor(scale: float) -> bytes:
    """[N, 3, 8, 8] -> per-channel means times ``scale``, plus 1: a [N, 3, 1, 1] feature map."""
    g = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["img"], ["pooled"]),
         helper.make_node("Mul", ["pooled", "scale"], ["scaled"]),
         helper.make_node("Add", ["scaled", "one"], ["maps"])],
        "extractor", [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("maps", TensorProto.FLOAT, ["N", 3, 1, 1])],
        [numpy_helper.from_array(np.array(scale, np.float32), "scale"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7).SerializeToString()


def _head_on(scale: float) -> dict:
    rng = np.random.RandomState(0)
    s = webapp.Session()
    x = rng.rand(12, 3, 8, 8).astype(np.float32)
    s.use_arrays(x, np.arange(12) % 2, classes=["a", "b"])
    return s.build_cnn(backbone={"bytes": _extractor(scale), "name": "flat.onnx"})


def test_features_that_barely_vary_are_pointed_out():
    model = _head_on(1e-8)
    msg = model["warning"]
    assert msg.startswith("Careful: flat.onnx gives almost the same features for every example"), msg
    assert "stay at chance" in msg and "pretrained weights, in evaluation mode" in msg
    assert "_" not in msg   # plain words: no argument or attribute names


def test_features_that_vary_get_no_warning():
    assert "warning" not in _head_on(1.0)
