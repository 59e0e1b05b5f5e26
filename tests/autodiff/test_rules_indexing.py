"""Gradient RULES of the indexing, scattering and padding ops (GatherElements, ScatterElements,
ScatterND, Trilu, Pad, Tile) end to end through generate_artifacts against float64 finite
differences (tests/helpers/grad_harness.py), then layers against torch.autograd in float32."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from grad_harness import Case, i64, node, rand
from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module

F32 = TensorProto.FLOAT


# ---- the cases ----------------------------------------------------------------------------------
def _gather_elements() -> List[Case]:
    return [
        Case("GatherElements axis 0, repeats, negative indices", [node("GatherElements", ["X", "I"], axis=0)],
             {"X": rand(3, 4), "I": i64([0, -1, 2, 0], [0, 0, -3, 1])}, ["Y"]),
        Case("GatherElements axis -1, indices narrower and longer than data",
             [node("GatherElements", ["X", "I"], axis=-1)],
             {"X": rand(3, 4), "I": i64([3, 3, 0, 1, -1], [1, 2, 2, 2, 0])}, ["Y"]),
        Case("GatherElements 3-D axis 1", [node("GatherElements", ["X", "I"], axis=1)],
             {"X": rand(2, 3, 2), "I": i64([[2, 0], [1, 1]], [[0, 0], [-1, 2]])}, ["Y"]),
    ]


def _gather_nd() -> List[Case]:
    return [
        Case("GatherND elements with a repeat", [node("GatherND", ["X", "I"])],
             {"X": rand(3, 4), "I": i64([0, 1], [2, -1], [0, 1])}, ["Y"]),
        Case("GatherND batch_dims 1 slices", [node("GatherND", ["X", "I"], batch_dims=1)],
             {"X": rand(2, 3, 2), "I": np.array([[[1], [0]], [[2], [2]]], dtype=np.int64)}, ["Y"]),
    ]


def _scatter_elements() -> List[Case]:
    def case(name, reduction, idx, opset, data=None, upd=None, axis=0):
        data = rand(3, 4) if data is None else data
        upd = rand(*idx.shape) if upd is None else upd
        return Case("ScatterElements " + name,
                    [node("ScatterElements", ["D", "I", "U"], axis=axis, reduction=reduction)],
                    {"D": data, "I": idx, "U": upd}, ["Y"], opset=opset)

    unique = i64([1, 0, 2, -1], [0, 2, 1, 0])
    repeated = i64([1, 1, 2, 0], [1, 0, -1, 0], [1, 2, 2, 0])
    zeros_d = rand(3, 4)
    zeros_d[1, 1] = 0.0
    zeros_u = rand(3, 4)
    zeros_u[0, 3] = zeros_u[2, 2] = 0.0
    return [
        Case("ScatterElements opset 11 (no reduction attribute)", [node("ScatterElements", ["D", "I", "U"], axis=1)],
             {"D": rand(3, 4), "I": i64([3, 0], [1, 2], [-1, 0]), "U": rand(3, 2)}, ["Y"], opset=11),
        case("none unique", "none", unique, 16),
        case("none repeated (the last write wins)", "none", repeated, 16),
        case("add repeated, axis 1", "add", i64([0, 0, 3], [-1, 2, 3], [1, 1, 1]), 16, axis=1),
        case("mul repeated with zeros", "mul", repeated, 16, data=zeros_d, upd=zeros_u),
        case("max repeated", "max", repeated, 18),
        case("min repeated", "min", repeated, 18),
    ]


def _scatter_nd() -> List[Case]:
    def case(name, reduction, data, idx, upd_shape, opset=18):
        return Case("ScatterND " + name, [node("ScatterND", ["D", "I", "U"], reduction=reduction)],
                    {"D": data, "I": idx, "U": rand(*upd_shape)}, ["Y"], opset=opset)

    return [
        Case("ScatterND opset 11", [node("ScatterND", ["D", "I", "U"])],
             {"D": rand(4, 3), "I": i64([2], [0]), "U": rand(2, 3)}, ["Y"], opset=11),
        case("none elements", "none", rand(3, 4), i64([0, 1], [2, -1], [1, 1]), (3,)),
        case("none rows repeated (the last write wins)", "none", rand(4, 3), i64([2], [-4], [2]), (3, 3)),
        case("add slices repeated", "add", rand(3, 2, 2), i64([[1], [1]], [[0], [-1]]), (2, 2, 2, 2)),
        case("mul rows repeated", "mul", rand(4, 3), i64([1], [3], [1]), (3, 3)),
        case("max elements repeated", "max", rand(3, 3), i64([0, 0], [2, 1], [0, 0]), (3,)),
        case("min rows repeated", "min", rand(3, 2), i64([1], [1], [0]), (3, 2)),
    ]


def _trilu() -> List[Case]:
    return [
        Case("Trilu upper default", [node("Trilu", ["X"])], {"X": rand(3, 4)}, ["Y"], opset=14),
        Case("Trilu upper k=1 batched", [node("Trilu", ["X", "k"], upper=1)],
             {"X": rand(2, 3, 3), "k": np.array(1, np.int64)}, ["Y"], opset=14),
        Case("Trilu lower k=-1", [node("Trilu", ["X", "k"], upper=0)],
             {"X": rand(4, 3), "k": np.array(-1, np.int64)}, ["Y"], opset=14),
    ]


def _pad() -> List[Case]:
    cases = [
        Case("Pad constant with a trained value", [node("Pad", ["X", "p", "V"])],
             {"X": rand(2, 3), "p": i64(1, 0, 2, 3), "V": np.array(0.7)}, ["Y"], opset=13),
        Case("Pad constant value of shape (1,), negative pads crop", [node("Pad", ["X", "p", "V"])],
             {"X": rand(3, 4), "p": i64(-1, 2, 1, -2), "V": np.array([0.3])}, ["Y"], opset=13),
        Case("Pad constant default value, axes input", [node("Pad", ["X", "p", "", "a"])],
             {"X": rand(2, 3, 4), "p": i64(2, -1, 0, 1), "a": i64(-1, 0)}, ["Y"], opset=18),
    ]
    for mode in ("reflect", "edge", "wrap"):
        cases += [
            Case("Pad %s" % mode, [node("Pad", ["X", "p"], mode=mode)],
                 {"X": rand(3, 4), "p": i64(2, 1, 1, 3)}, ["Y"], opset=19),
            Case("Pad %s crop and axes, unused constant" % mode, [node("Pad", ["X", "p", "V", "a"], mode=mode)],
                 {"X": rand(2, 4, 5), "p": i64(-1, 2, 2, -1), "a": i64(2, 1), "V": np.array(0.5)}, ["Y"],
                 opset=19),
        ]
    return cases


def _tile() -> List[Case]:
    return [
        Case("Tile", [node("Tile", ["X", "r"])], {"X": rand(2, 3), "r": i64(3, 2)}, ["Y"]),
        Case("Tile 3-D with ones", [node("Tile", ["X", "r"])], {"X": rand(2, 1, 3), "r": i64(1, 4, 1)}, ["Y"]),
        Case("Tile 1-D", [node("Tile", ["X", "r"])], {"X": rand(3), "r": i64(2)}, ["Y"]),
    ]


CASES: Dict[str, Callable[[], List[Case]]] = {
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "Pad": _pad,
    "ScatterElements": _scatter_elements,
    "ScatterND": _scatter_nd,
    "Tile": _tile,
    "Trilu": _trilu,
}


# ---- layers against torch.autograd (float32) ----------------------------------------------------
torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def torch_check(nodes, params: Dict[str, np.ndarray], consts: Dict[str, np.ndarray], out_shape: Sequence[int],
                fn, opset: int = 18) -> None:
    """One SGD training step of ``nodes`` (output "out", MSE loss to a random target) against
    torch: the loss and the gradient of every float parameter."""
    target = f32(*out_shape)
    inits = dict(params, **consts)
    graph = helper.make_graph(list(nodes), "layer", [], [helper.make_tensor_value_info("out", F32, list(out_shape))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=sorted(params),
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(Module(arts.training_model, state, arts.eval_model)(target))
    ts = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    ref = TF.mse_loss(fn(ts), torch.tensor(target))
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5, atol=1e-7)
    for k, t in ts.items():
        got = state.parameters[k].grad
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_torch_gather():
    idx = np.array([[2, 0, 1, 2], [0, 0, 3, 1]], dtype=np.int64)  # repeats accumulate
    torch_check([node("GatherElements", ["X", "I"], ["out"], axis=1)], {"X": f32(2, 5)}, {"I": idx}, (2, 4),
                lambda t: torch.gather(t["X"], 1, torch.tensor(idx)))


def test_torch_scatter_src():
    idx = np.array([[1, 0, 2], [2, 1, 0]], dtype=np.int64)  # no repeat: torch's scatter is defined
    torch_check([node("ScatterElements", ["X", "I", "U"], ["out"], axis=0)], {"X": f32(3, 3), "U": f32(2, 3)},
                {"I": idx}, (3, 3), lambda t: t["X"].scatter(0, torch.tensor(idx), t["U"]))


def test_torch_scatter_add():
    idx = np.array([[1, 1, 0, 1], [3, 0, 0, 0]], dtype=np.int64)
    torch_check([node("ScatterElements", ["X", "I", "U"], ["out"], axis=1, reduction="add")],
                {"X": f32(2, 4), "U": f32(2, 4)}, {"I": idx}, (2, 4),
                lambda t: t["X"].scatter_add(1, torch.tensor(idx), t["U"]))


@pytest.mark.parametrize("reduction,torch_name", [("mul", "prod"), ("max", "amax"), ("min", "amin")])
def test_torch_scatter_reduce_with_ties_and_zeros(reduction, torch_name):
    x, u = f32(3, 4), f32(3, 4)
    idx = np.array([[0, 1, 1, 2], [0, 1, 2, 2], [2, 1, 1, 2]], dtype=np.int64)
    # ties between data and updates and among updates (the gradient is shared evenly, as torch does)
    u[0, 0] = x[0, 0]
    u[2, 1] = u[1, 1] = x[1, 1] + 5.0 if reduction == "max" else x[1, 1] - 5.0
    x[2, 3] = 0.0  # a zero among a product's factors
    torch_check([node("ScatterElements", ["X", "I", "U"], ["out"], axis=0, reduction=reduction)],
                {"X": x, "U": u}, {"I": idx}, (3, 4),
                lambda t: t["X"].scatter_reduce(0, torch.tensor(idx), t["U"], torch_name, include_self=True))


def test_torch_index_put_accumulate_is_scatter_nd_add():
    idx = np.array([[1], [3], [1]], dtype=np.int64)
    torch_check([node("ScatterND", ["X", "I", "U"], ["out"], reduction="add")], {"X": f32(4, 3), "U": f32(3, 3)},
                {"I": idx}, (4, 3), lambda t: t["X"].index_put((torch.tensor(idx[:, 0]),), t["U"], accumulate=True))


@pytest.mark.parametrize("upper,k", [(1, 0), (1, 2), (0, 0), (0, -1)])
def test_torch_triu_tril(upper, k):
    op = torch.triu if upper else torch.tril
    torch_check([node("Trilu", ["X", "k"], ["out"], upper=upper)], {"X": f32(2, 4, 5)},
                {"k": np.array(k, np.int64)}, (2, 4, 5), lambda t: op(t["X"], k))


@pytest.mark.parametrize("mode,torch_mode", [("reflect", "reflect"), ("edge", "replicate"), ("wrap", "circular"),
                                             ("constant", "constant")])
def test_torch_pad(mode, torch_mode):
    # torch lists (left, right) from the last axis backwards; ONNX all begins, then all ends
    torch_pads = (2, 1, 1, 2) if mode != "constant" else (2, -1, -1, 2)
    onnx_pads = np.array([0, 0, torch_pads[2], torch_pads[0], 0, 0, torch_pads[3], torch_pads[1]], np.int64)
    consts = {"p": onnx_pads}
    inputs = ["X", "p"]
    if mode == "constant":
        consts["V"] = np.array(0.25, np.float32)
        inputs.append("V")
    extra = {"value": 0.25} if mode == "constant" else {}
    out_h, out_w = 4 + torch_pads[2] + torch_pads[3], 5 + torch_pads[0] + torch_pads[1]
    torch_check([node("Pad", inputs, ["out"], mode=mode)], {"X": f32(2, 3, 4, 5)}, consts, (2, 3, out_h, out_w),
                lambda t: TF.pad(t["X"], torch_pads, mode=torch_mode, **extra), opset=19)


def test_torch_repeat_is_tile():
    torch_check([node("Tile", ["X", "r"], ["out"])], {"X": f32(2, 3)}, {"r": np.array([2, 3], np.int64)}, (4, 9),
                lambda t: t["X"].repeat(2, 3))


def test_torch_onnx_export_of_the_indexing_layers():
    """torch.onnx.export (TorchScript exporter) of a module with torch.gather, F.pad (constant as in
    MobileBERT's embeddings, and reflect), torch.triu, scatter_add and repeat: one step's loss and
    every parameter's gradient equal torch's."""
    import io

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Parameter(torch.randn(6, 8))
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, idx):
            h = self.lin(x)
            h = TF.pad(h[:, 1:], [0, 0, 0, 1, 0, 0], value=0.0)
            h = h + torch.gather(self.emb[None].repeat(3, 1, 1) * 1.0, 1, idx)
            h = torch.triu(h, diagonal=1) + TF.pad(h, [1, 1, 2, 0], mode="reflect")[:, 2:, 1:-1]
            h = h.scatter_add(2, idx[..., :3], h[..., :3] * 2)
            return h.repeat(1, 2, 1).sum(-1)

    torch.manual_seed(0)
    net = Net()
    x, idx, target = torch.randn(3, 6, 8), torch.randint(0, 6, (3, 6, 8)), torch.randn(3, 12)
    f = io.BytesIO()
    torch.onnx.export(net, (x, idx), f, input_names=["x", "idx"], output_names=["y"], opset_version=18,
                      dynamo=False, do_constant_folding=False)
    arts = artifacts.generate_artifacts(f.getvalue(), requires_grad=["emb", "lin.weight", "lin.bias"],
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(Module(arts.training_model, state, arts.eval_model)(x.numpy(), idx.numpy(), target.numpy()))
    ref = TF.mse_loss(net(x, idx), target)
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5)
    for name, p in net.named_parameters():
        np.testing.assert_allclose(state.parameters[name].grad, p.grad.numpy(), rtol=1e-4, atol=2e-5, err_msg=name)
