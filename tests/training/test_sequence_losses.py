"""Cross entropy over sequences, against torch.nn.functional.cross_entropy:
logits (N, C, d1, ...) with labels (N, d1, ...), ignore_index -100 by default as torch's, and
the Hugging Face layout (N, L, C) with labels (N, L) through ``CrossEntropyLoss(class_axis=-1)``."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytrain.generator import artifacts, losses
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.errors import ArtifactError

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _logits_model(shape, declare_shape=True) -> bytes:
    """out = Identity(P): the logits are the trained parameter, so P's gradient is dLoss/dlogits."""
    g = helper.make_graph([helper.make_node("Identity", ["P"], ["out"])], "g", [],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, list(shape) if declare_shape else None)],
                          [numpy_helper.from_array(np.zeros(shape, np.float32), "P")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _step(loss, logits: np.ndarray, labels: np.ndarray):
    arts = artifacts.generate_artifacts(_logits_model(logits.shape), requires_grad=["P"], loss=loss,
                                        optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    state.parameters["P"].data[...] = logits
    value = np.asarray(Module(arts.training_model, state)(labels))
    return value, state.parameters["P"].grad


def _torch(logits, labels, class_last=False, **kw):
    x = torch.tensor(logits, requires_grad=True)
    y = torch.tensor(labels)
    if class_last:
        c = logits.shape[-1]
        out = TF.cross_entropy(x.view(-1, c), y.view(-1), **kw)
        if kw.get("reduction") == "none":
            out = out.view(labels.shape)
    else:
        out = TF.cross_entropy(x, y, **kw)
    out.backward(torch.ones_like(out))  # sum of the outputs for reduction none
    return out.detach().numpy(), x.grad.numpy()


def _labels(rng, shape, classes, ignored=0.3):
    y = rng.integers(0, classes, shape).astype(np.int64)
    y[rng.random(shape) < ignored] = -100
    y.reshape(-1)[0] = 1  # never all ignored
    return y


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(3, 5, 4), (2, 4, 3, 2), (6, 3)])
def test_class_axis_1_with_default_ignore_index(shape, reduction):
    rng = np.random.default_rng(len(shape))
    logits = rng.standard_normal(shape).astype(np.float32) * 2
    labels = _labels(rng, (shape[0],) + shape[2:], shape[1])
    got, grad = _step(losses.CrossEntropyLoss(reduction=reduction), logits, labels)
    want, want_grad = _torch(logits, labels, reduction=reduction)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    assert np.all(grad.swapaxes(0, 1)[:, labels == -100] == 0)  # ignored positions get no gradient


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(2, 7, 5), (3, 2, 4, 6), (5, 4)])
def test_class_axis_last_as_hugging_face_logits(shape, reduction):
    rng = np.random.default_rng(10 + len(shape))
    logits = rng.standard_normal(shape).astype(np.float32) * 2
    labels = _labels(rng, shape[:-1], shape[-1])
    weight = rng.uniform(0.2, 2.0, shape[-1]).astype(np.float32)
    got, grad = _step(losses.CrossEntropyLoss(reduction=reduction, class_axis=-1, weight=weight), logits, labels)
    want, want_grad = _torch(logits, labels, class_last=True, reduction=reduction, weight=torch.tensor(weight))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


def test_ignore_index_none_refuses_negative_labels_and_custom_index_works():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 3, 2)).astype(np.float32)
    labels = np.array([[0, 2], [1, 1], [2, 0], [1, 2]], dtype=np.int64)
    got, grad = _step(losses.CrossEntropyLoss(ignore_index=2), logits, labels)
    want, want_grad = _torch(logits, labels, ignore_index=2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    labels[0, 0] = -100
    with pytest.raises(Exception, match=r"\[0, 3\)|out of range"):
        _step(losses.CrossEntropyLoss(ignore_index=None), logits, labels)


def test_class_axis_errors():
    with pytest.raises(ArtifactError, match="class_axis"):
        losses.CrossEntropyLoss(class_axis=2)
    model = _logits_model((2, 3, 4), declare_shape=False)
    with pytest.raises(ArtifactError, match="needs the rank"):
        artifacts.generate_artifacts(model, requires_grad=["P"], loss=losses.CrossEntropyLoss(class_axis=-1))


def test_token_model_trains_as_torch_with_masked_labels():
    """A tiny masked-LM head (embedding -> linear over the vocabulary, logits (N, L, V)) trained 8
    SGD steps with labels -100 on unmasked tokens: pytrain's losses equal torch's."""
    rng = np.random.default_rng(5)
    vocab, dim, n, length = 11, 6, 3, 7
    emb = rng.standard_normal((vocab, dim)).astype(np.float32) * 0.5
    w = rng.standard_normal((dim, vocab)).astype(np.float32) * 0.5
    b = np.zeros(vocab, np.float32)
    nodes = [helper.make_node("Gather", ["E", "tokens"], ["h"]), helper.make_node("MatMul", ["h", "W"], ["hw"]),
             helper.make_node("Add", ["hw", "B"], ["logits"])]
    g = helper.make_graph(nodes, "mlm", [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["N", length])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", length, vocab])],
                          [numpy_helper.from_array(v, k) for k, v in (("E", emb), ("W", w), ("B", b))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    arts = artifacts.generate_artifacts(model.SerializeToString(), loss=losses.CrossEntropyLoss(class_axis=-1),
                                        optimizer=artifacts.SGD(momentum=0.9))
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.5)

    tE, tW, tB = (torch.tensor(v, requires_grad=True) for v in (emb, w, b))
    topt = torch.optim.SGD([tE, tW, tB], lr=0.5, momentum=0.9)
    got, want = [], []
    for _ in range(8):
        tokens = rng.integers(0, vocab, (n, length)).astype(np.int64)
        labels = np.full((n, length), -100, np.int64)
        masked = rng.random((n, length)) < 0.3
        masked[:, 0] = True
        labels[masked] = tokens[masked]
        got.append(float(module(tokens, labels)))
        opt.step()
        module.lazy_reset_grad()
        topt.zero_grad()
        logits = tE[torch.tensor(tokens)] @ tW + tB
        loss = TF.cross_entropy(logits.view(-1, vocab), torch.tensor(labels).view(-1))
        loss.backward()
        topt.step()
        want.append(loss.item())
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(state.parameters["E"].data, tE.detach().numpy(), rtol=1e-4, atol=1e-5)
