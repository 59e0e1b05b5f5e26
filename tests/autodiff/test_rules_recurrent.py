"""Gradient rules of RNN, GRU and LSTM through the artifact generator (tests/helpers/grad_harness.py):
one train step's gradients against float64 finite differences, for every differentiable input
(X, W, R, B, initial_h, initial_c, P), directions, layouts, sequence_lens and omitted outputs.
Then nn.RNN / nn.GRU / nn.LSTM exported by torch.onnx.export(dynamo=False) against torch.autograd
in float32: forward output, loss and every parameter's gradient, and 10 SGD+momentum steps."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np
import pytest

from grad_harness import Case, node, rand

T, N, I, H = 3, 2, 2, 3


def _inits(gates: int, D: int, layout: int, lstm: bool) -> Dict[str, np.ndarray]:
    inits = {"X": rand(T, N, I) if layout == 0 else rand(N, T, I), "W": rand(D, gates * H, I),
             "R": rand(D, gates * H, H, lo=-0.7, hi=0.7), "B": rand(D, 2 * gates * H),
             "h0": rand(D, N, H) if layout == 0 else rand(N, D, H)}
    if lstm:
        inits["c0"] = rand(*inits["h0"].shape)
        inits["P"] = rand(D, 3 * H)
    return inits


def _cases(op: str, gates: int, variants: Sequence[dict]) -> List[Case]:
    lstm = op == "LSTM"
    cases = []
    for v in variants:
        v = dict(v)
        outs = v.pop("outs", ["Y", "Y_h", "Y_c"] if lstm else ["Y", "Y_h"])
        lens = v.pop("lens", None)
        D = 2 if v.get("direction") == "bidirectional" else 1
        inits = _inits(gates, D, int(v.get("layout", 0)), lstm)
        names = ["X", "W", "R", "B", "", "h0"] + (["c0", "P"] if lstm else [])
        if lens is not None:
            inits["lens"] = np.array(lens, dtype=np.int32)
            names[4] = "lens"
        if not v.pop("bias", True):
            names[3] = ""
            del inits["B"]
        all_outs = ["Y", "Y_h", "Y_c"] if lstm else ["Y", "Y_h"]
        node_outs = [o if o in outs else "" for o in all_outs]
        while node_outs[-1] == "":
            node_outs.pop()
        label = "%s %s outs=%s lens=%s" % (op, sorted(v.items()), outs, lens)
        cases.append(Case(label, [node(op, names, node_outs, hidden_size=H, **v)], inits, outs, opset=14))
    return cases


def _rnn() -> List[Case]:
    return _cases("RNN", 1, [
        {},
        {"direction": "reverse", "outs": ["Y_h"], "lens": [3, 2]},
        {"direction": "bidirectional", "layout": 1, "lens": [1, 3]},
        {"activations": ["Sigmoid"], "outs": ["Y"], "bias": False},
        {"clip": 0.6, "direction": "bidirectional"},
    ])


def _gru() -> List[Case]:
    return _cases("GRU", 3, [
        {"linear_before_reset": 1},
        {"linear_before_reset": 0, "direction": "reverse"},
        {"linear_before_reset": 1, "direction": "bidirectional", "layout": 1, "lens": [2, 3]},
        {"linear_before_reset": 0, "direction": "bidirectional", "lens": [3, 1], "outs": ["Y_h"]},
        {"linear_before_reset": 0, "clip": 0.7, "outs": ["Y"], "bias": False},
    ])


def _lstm() -> List[Case]:
    return _cases("LSTM", 4, [
        {},
        {"direction": "reverse", "outs": ["Y_c"]},
        {"direction": "bidirectional", "layout": 1, "lens": [3, 2]},
        {"direction": "bidirectional", "lens": [0, 3], "outs": ["Y", "Y_h"]},
        {"input_forget": 1, "outs": ["Y_h", "Y_c"]},
        {"clip": 0.8, "layout": 1, "bias": False},
    ])


CASES: Dict[str, Callable[[], List[Case]]] = {"RNN": _rnn, "GRU": _gru, "LSTM": _lstm}


# ---- layers against torch.autograd (float32), exported by the TorchScript exporter ----------------
class _Seq:
    """nn.RNN / nn.GRU / nn.LSTM with a head reading Y (mean over time), Y_h and Y_c, so every
    output's gradient flows back through the recurrent node."""

    @staticmethod
    def make(kind: str, layers: int, bidirectional: bool, batch_first: bool):
        import torch
        from torch import nn

        class Seq(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                extra = {"nonlinearity": "relu"} if kind == "RNN_relu" else {}
                self.rnn = getattr(nn, kind.split("_")[0])(4, 5, num_layers=layers, bidirectional=bidirectional,
                                                           batch_first=batch_first, **extra)
                width = 5 * (2 if bidirectional else 1)
                self.fc = nn.Linear(width, 3)
                self.fc_h = nn.Linear(5, 3)
                self.fc_c = nn.Linear(5, 3) if kind == "LSTM" else None

            def forward(self, x):
                y, state = self.rnn(x)
                out = self.fc(y.mean(dim=1 if batch_first else 0))
                if kind == "LSTM":
                    h, c = state
                    return out + self.fc_h(h[-1]) + self.fc_c(torch.tanh(c[0]))
                return out + self.fc_h(state[-1])

        torch.manual_seed(layers * 10 + bidirectional * 2 + batch_first)
        return Seq()


# (kind, num_layers, bidirectional, batch_first); RNN_relu is nn.RNN(nonlinearity="relu")
TORCH_CASES = [("RNN", 1, False, True), ("RNN", 2, True, False), ("RNN_relu", 2, True, True),
               ("GRU", 1, True, True), ("GRU", 2, False, False), ("LSTM", 2, True, True), ("LSTM", 1, False, False)]


@pytest.mark.parametrize("kind,layers,bidirectional,batch_first", TORCH_CASES)
def test_layer_gradients_match_torch(kind, layers, bidirectional, batch_first):
    torch = pytest.importorskip("torch")
    import copy
    import io
    import warnings

    from pytrain.generator import artifacts
    from pytrain.device.api import CheckpointState, Module
    from pytrain.engine.runtime import InferenceSession

    model = _Seq.make(kind, layers, bidirectional, batch_first)
    rng = np.random.default_rng(0)
    n, t = 4, 6
    x = rng.standard_normal((n, t, 4) if batch_first else (t, n, 4)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.int64)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(model), (torch.from_numpy(x),), f, input_names=["input"],
                          output_names=["output"], opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, dynamo=False,
                          dynamic_axes={"input": {0 if batch_first else 1: "N"}, "output": {0: "N"}})
    onnx_bytes = f.getvalue()

    # forward: pytrain's executor on the inference model equals torch's output
    want = model(torch.from_numpy(x))
    got = InferenceSession(onnx_bytes).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-6)

    # gradients of the cross-entropy loss w.r.t. every parameter
    loss = torch.nn.functional.cross_entropy(want, torch.from_numpy(y))
    loss.backward()
    arts = artifacts.generate_artifacts(onnx_bytes, requires_grad=None, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    ours = float(module(x, y))
    np.testing.assert_allclose(ours, loss.item(), rtol=1e-5)
    params = dict(model.named_parameters())
    trained = sorted(k for k, p in state.parameters.items() if p.requires_grad)
    assert trained == sorted(params)
    for name, p in params.items():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_ten_steps_train_like_torch(kind):
    """2-layer bidirectional batch-first layers: 10 SGD+momentum steps, the loss at every step and
    the final weights within 1e-3 of torch's."""
    torch = pytest.importorskip("torch")
    import copy

    from pytrain.generator import artifacts
    from torch_models import export, torch_steps
    from train_helpers import train_steps

    model = _Seq.make(kind, 2, True, True)
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(10):
        x = rng.standard_normal((8, 6, 4)).astype(np.float32)
        batches.append((x, (x[:, :, 0].sum(axis=1) > 0).astype(np.int64) + (x[:, -1, 1] > 0)))
    onnx_bytes = export(copy.deepcopy(model), torch.from_numpy(batches[0][0]))
    ref = torch_steps(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), batches)
    arts = artifacts.generate_artifacts(onnx_bytes, requires_grad=None, optimizer=artifacts.SGD(momentum=0.9),
                                        loss=artifacts.LossType.CrossEntropyLoss)
    losses, state = train_steps(arts, batches, lr=0.1)
    np.testing.assert_allclose(losses, ref, rtol=1e-3)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(state.parameters[name].data, p.detach().numpy(), rtol=1e-3, atol=1e-5,
                                   err_msg=name)
