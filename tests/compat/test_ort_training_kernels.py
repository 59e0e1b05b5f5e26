"""ORT's training ops that BERT and the recurrent layers bring (``pytrain/ops/train/op_ort_training.py``),
one kernel at a time: com.microsoft Gelu against onnxruntime's own contrib kernel, GeluGrad and
TanhGrad against torch.autograd, SplitTraining against the lengths ConcatTraining records. (Whole
ORT-made models with them: test_ort_made_models.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from gradcheck import run_kernel

MS = "com.microsoft"


def _x(shape=(3, 7), seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(np.float32)


def test_gelu_is_onnxruntimes_contrib_gelu():
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = _x()
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], domain=MS)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (mine,) = run_kernel("Gelu", x, domain=MS)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["GeluGrad", "TanhGrad"])
def test_activation_gradients_match_torch_autograd(op):
    torch = pytest.importorskip("torch")
    x, dy = _x(), _x(seed=1)
    t = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.gelu(t) if op == "GeluGrad" else torch.tanh(t)
    y.backward(torch.tensor(dy))
    # ORT's GeluGrad reads Gelu's input, TanhGrad Tanh's output
    second = x if op == "GeluGrad" else y.detach().numpy()
    (mine,) = run_kernel(op, dy, second, domain=MS)
    np.testing.assert_allclose(mine, t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_split_training_undoes_concat_training():
    parts = [_x((2, n), seed=n) for n in (3, 1, 4)]
    y, lengths = run_kernel("ConcatTraining", *parts, domain=MS, axis=1)
    assert lengths.dtype == np.int64 and lengths.tolist() == [3, 1, 4]
    back = run_kernel("SplitTraining", y, lengths, domain=MS, wants=(True, True, True), axis=1)
    for a, b in zip(back, parts):
        np.testing.assert_array_equal(a, b)
