"""IsNaN and IsInf (what PyTorch's lowering of scaled_dot_product_attention emits) against onnx's
ReferenceEvaluator and onnxruntime, at every opset that defines them; their bool outputs carry no
gradient, so a graph that masks with them still trains."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import check


def _special(dtype) -> np.ndarray:
    x = np.array([[0.0, -1.5, np.inf, -np.inf], [np.nan, 3.0, -0.0, np.nan], [1e30, -1e30, np.inf, 2.0]])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("opset", [9, 13, 20])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_isnan(opset, dtype):
    check("IsNaN", [_special(dtype)], opset=opset)
    check("IsNaN", [np.asarray(_special(dtype)[1, 0])], opset=opset, oracle="ort")  # rank 0


@pytest.mark.parametrize("opset", [10, 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("neg,pos", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf(opset, dtype, neg, pos):
    attrs = {"detect_negative": neg, "detect_positive": pos}
    check("IsInf", [_special(dtype)], attrs, opset=opset)
    check("IsInf", [_special(dtype)], attrs, opset=opset, oracle="ort")


def test_masking_with_isnan_trains():
    """y = Where(IsNaN(x), 0, x) @ W, as SDPA's lowering guards a fully masked row: W trains, and the
    gradient of the masked entries is zero."""
    from onnx import TensorProto, helper, numpy_helper

    from pytrain.generator import artifacts
    from pytrain.device.api import CheckpointState, Module

    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("IsNaN", ["x"], ["nan"]),
         helper.make_node("Where", ["nan", "zero", "x"], ["clean"]),
         helper.make_node("MatMul", ["clean", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss)
    assert arts.summary["trainable_count"] == w.size
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint))
    x = np.array([[1.0, np.nan, 2.0, 0.5], [0.0, 1.0, np.nan, -1.0]], np.float32)
    target = np.zeros((2, 3), np.float32)
    loss = module(x, target)
    clean = np.nan_to_num(x, nan=0.0)
    want = np.mean((clean @ w) ** 2)
    np.testing.assert_allclose(float(np.asarray(loss)), want, rtol=1e-5)
    grad = module.state.parameters["w"].grad
    np.testing.assert_allclose(grad, clean.T @ (2 * (clean @ w) / target.size), rtol=1e-5, atol=1e-6)
