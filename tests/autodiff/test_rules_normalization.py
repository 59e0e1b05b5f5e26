"""Gradient rules of InstanceNormalization, GroupNormalization, RMSNormalization and Attention:
end to end through generate_artifacts (tests/helpers/grad_harness.py: one float64 train step against
central finite differences), the errors for what the Attention rule does not differentiate, and
the layers against torch.autograd in float32 (hand-built graphs, and real exports by both of
torch's exporters)."""
from __future__ import annotations

import warnings
from typing import Callable, Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from grad_harness import Case, check, f32, node, rand, with_loss
from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module
from pytrain.errors import UnsupportedOpError


def _instancenorm() -> List[Case]:
    return [
        Case("InstanceNormalization NCHW", [node("InstanceNormalization", ["X", "S", "B"], epsilon=1e-3)],
             {"X": rand(2, 3, 2, 3), "S": rand(3), "B": rand(3)}, ["Y"]),
        Case("InstanceNormalization NCL", [node("InstanceNormalization", ["X", "S", "B"])],
             {"X": rand(3, 2, 4), "S": rand(2), "B": rand(2)}, ["Y"]),
        # GroupNorm as torch's TorchScript exporter writes it: Reshape + InstanceNormalization + Reshape + Mul + Add
        Case("InstanceNormalization GroupNorm export", [
            node("Reshape", ["X", "shape_g"], ["xg"]),
            node("InstanceNormalization", ["xg", "ones", "zeros"], ["ng"], epsilon=1e-5),
            node("Shape", ["X"], ["shape_x"]),
            node("Reshape", ["ng", "shape_x"], ["n"]),
            node("Mul", ["n", "W"], ["nw"]),
            node("Add", ["nw", "Bc"], ["Y"])],
            {"X": rand(2, 4, 3), "shape_g": np.array([2, 2, -1], dtype=np.int64), "ones": np.ones(2),
             "zeros": np.zeros(2), "W": rand(4, 1), "Bc": rand(4, 1)}, ["Y"], params=["X", "W", "Bc"]),
    ]


def _groupnorm() -> List[Case]:
    return [
        Case("GroupNormalization opset 21", [node("GroupNormalization", ["X", "S", "B"], num_groups=2, epsilon=1e-3)],
             {"X": rand(2, 4, 3), "S": rand(4), "B": rand(4)}, ["Y"], opset=21),
        Case("GroupNormalization opset 21 NCHW stash double",
             [node("GroupNormalization", ["X", "S", "B"], num_groups=3, stash_type=11)],
             {"X": rand(2, 6, 2, 2), "S": rand(6), "B": rand(6)}, ["Y"], opset=21),
        Case("GroupNormalization opset 18 per group", [node("GroupNormalization", ["X", "S", "B"], num_groups=2)],
             {"X": rand(2, 4, 3), "S": rand(2), "B": rand(2)}, ["Y"], opset=18),
    ]


def _rmsnorm() -> List[Case]:
    return [
        Case("RMSNormalization axis -1", [node("RMSNormalization", ["X", "S"], epsilon=1e-3)],
             {"X": rand(2, 3, 4), "S": rand(4)}, ["Y"], opset=23),
        Case("RMSNormalization axis 1", [node("RMSNormalization", ["X", "S"], axis=1)],
             {"X": rand(2, 3, 4), "S": rand(3, 4)}, ["Y"], opset=23),
    ]


def _attention() -> List[Case]:
    mask = np.array([[True, True, False, True], [True, False, True, True], [False, True, True, True]])
    return [
        Case("Attention 4-D", [node("Attention", ["Q", "K", "V"])],
             {"Q": rand(2, 2, 3, 4), "K": rand(2, 2, 4, 4), "V": rand(2, 2, 4, 3)}, ["Y"], opset=23),
        Case("Attention 3-D grouped query causal", [node("Attention", ["Q", "K", "V"], q_num_heads=4, kv_num_heads=2,
                                                          is_causal=1)],
             {"Q": rand(2, 3, 8), "K": rand(2, 3, 4), "V": rand(2, 3, 6)}, ["Y"], opset=23),
        Case("Attention bool mask softcap scale", [node("Attention", ["Q", "K", "V", "M"], softcap=2.0, scale=0.4)],
             {"Q": rand(1, 2, 3, 4), "K": rand(1, 2, 4, 4), "V": rand(1, 2, 4, 3), "M": mask}, ["Y"], opset=23),
        Case("Attention trained float mask (relative position bias)", [node("Attention", ["Q", "K", "V", "M"])],
             {"Q": rand(2, 2, 3, 4), "K": rand(2, 2, 4, 4), "V": rand(2, 2, 4, 3), "M": rand(1, 2, 3, 4)}, ["Y"],
             opset=23),
        Case("Attention cache trained", [node("Attention", ["Q", "K", "V", "", "PK", "PV"], ["Y", "PKo", "PVo"],
                                              is_causal=1)],
             {"Q": rand(1, 2, 2, 4), "K": rand(1, 2, 2, 4), "V": rand(1, 2, 2, 3), "PK": rand(1, 2, 3, 4),
              "PV": rand(1, 2, 3, 3)}, ["Y"], opset=23),
    ]


CASES: Dict[str, Callable[[], List[Case]]] = {
    "Attention": _attention,
    "GroupNormalization": _groupnorm,
    "InstanceNormalization": _instancenorm,
    "RMSNormalization": _rmsnorm,
}


@pytest.mark.parametrize("output", ["present_key", "qk_matmul_output"])
def test_attention_loss_through_other_outputs_is_refused(output):
    """Only Y is differentiated: a loss reading present_key or qk_matmul_output is an error naming
    the node and the output, not a silently missing gradient term."""
    outs = ["Y", "present_key", "present_value", "qk"]
    case = Case("Attention " + output, [helper.make_node("Attention", ["Q", "K", "V"], outs, name="the_attention")],
                {"Q": rand(1, 2, 3, 4), "K": rand(1, 2, 3, 4), "V": rand(1, 2, 3, 4)},
                ["Y", "qk" if output == "qk_matmul_output" else output], opset=23)
    model = with_loss(case)
    with pytest.raises(UnsupportedOpError) as err:
        artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["Q", "K"], loss=None)
    assert "the_attention" in str(err.value) and output in str(err.value)


def test_attention_qk_output_unused_by_loss_is_fine():
    """The debug output exposed but not on the loss path does not stop training."""
    case = Case("Attention qk exposed", [node("Attention", ["Q", "K", "V"], ["Y", "", "", "qk"],
                                              qk_matmul_output_mode=3)],
                {"Q": rand(1, 2, 3, 4), "K": rand(1, 2, 3, 4), "V": rand(1, 2, 3, 4)}, ["Y"], opset=23)
    check(case)



# ---- layers against torch.autograd (float32): one training step, loss and parameter gradients ----
try:
    import torch
    TF = torch.nn.functional
except ImportError:  # the rule tests above need no torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
F32 = TensorProto.FLOAT


def layer_model(nodes, x_shape, params: Dict[str, np.ndarray], out_shape, opset: int,
                consts: Dict[str, np.ndarray] = None) -> bytes:
    inits = [numpy_helper.from_array(v, k) for k, v in dict(params, **(consts or {})).items()]
    graph = helper.make_graph(list(nodes), "layer", [helper.make_tensor_value_info("X", F32, list(x_shape))],
                              [helper.make_tensor_value_info("out", F32, list(out_shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9).SerializeToString()


def step(model: bytes, params: Dict[str, np.ndarray], x: np.ndarray, target: np.ndarray):
    """pytrain's MSE loss and parameter gradients after one training step."""
    arts = artifacts.generate_artifacts(model, requires_grad=sorted(params), loss=artifacts.LossType.MSELoss,
                                        optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(Module(arts.training_model, state, arts.eval_model)(x, target))
    return loss, {k: state.parameters[k].grad for k in params}


def torch_step(fn, params: Dict[str, np.ndarray], x: np.ndarray, target: np.ndarray):
    ts = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    loss = TF.mse_loss(fn(torch.tensor(x), ts), torch.tensor(target))
    loss.backward()
    return float(loss.detach()), {k: t.grad.numpy() for k, t in ts.items()}


def layer_fn(layer, before, **names: str):
    """x -> layer(before(x, t)) with the layer's parameters (weight, bias) taken from t[names[...]]."""
    def fn(xt, t):
        return torch.func.functional_call(layer, {k: t[v] for k, v in names.items()}, (before(xt, t),))
    return fn


def compare(got, want, rtol=1e-4, atol=1e-5):
    (loss, grads), (ref_loss, ref_grads) = got, want
    np.testing.assert_allclose(loss, ref_loss, rtol=rtol, atol=atol)
    for k, g in ref_grads.items():
        assert grads[k].dtype == np.float32, k
        np.testing.assert_allclose(grads[k], g, rtol=rtol, atol=atol, err_msg=k)


@needs_torch
def test_torch_instance_norm_2d_affine():
    c = 3
    p = {"W": f32(c, 1, 1) + 1, "S": f32(c), "B": f32(c)}
    x, target = f32(2, c, 4, 5), f32(2, c, 4, 5, scale=0.5)
    nodes = [helper.make_node("Mul", ["X", "W"], ["xw"]),  # a layer before, so dX is checked through dW
             helper.make_node("InstanceNormalization", ["xw", "S", "B"], ["out"], epsilon=1e-5)]
    norm = torch.nn.InstanceNorm2d(c, affine=True, eps=1e-5)
    fn = layer_fn(norm, lambda xt, t: xt * t["W"], weight="S", bias="B")
    compare(step(layer_model(nodes, x.shape, p, x.shape, 17), p, x, target), torch_step(fn, p, x, target))


@needs_torch
@pytest.mark.parametrize("form", ["GroupNormalization opset 21", "TorchScript export (InstanceNormalization)"])
def test_torch_group_norm(form):
    n, c, g = 2, 6, 3
    p = {"W": f32(c, 1) + 1, "S": f32(c), "B": f32(c)}
    x, target = f32(n, c, 5), f32(n, c, 5, scale=0.5)
    if form.startswith("GroupNormalization"):
        nodes = [helper.make_node("Mul", ["X", "W"], ["xw"]),
                 helper.make_node("GroupNormalization", ["xw", "S", "B"], ["out"], num_groups=g, epsilon=1e-5)]
        model, consts = 21, {}
    else:  # nn.GroupNorm as torch.onnx.export(dynamo=False) writes it
        nodes = [helper.make_node("Mul", ["X", "W"], ["xw"]),
                 helper.make_node("Reshape", ["xw", "grouped"], ["xg"]),
                 helper.make_node("InstanceNormalization", ["xg", "ones", "zeros"], ["ng"], epsilon=1e-5),
                 helper.make_node("Shape", ["xw"], ["shape"]),
                 helper.make_node("Reshape", ["ng", "shape"], ["nr"]),
                 helper.make_node("Unsqueeze", ["S", "axes"], ["s1"]),
                 helper.make_node("Unsqueeze", ["B", "axes"], ["b1"]),
                 helper.make_node("Mul", ["nr", "s1"], ["ns"]),
                 helper.make_node("Add", ["ns", "b1"], ["out"])]
        model, consts = 17, {"grouped": np.array([0, g, -1], dtype=np.int64), "ones": np.ones(g, np.float32),
                             "zeros": np.zeros(g, np.float32), "axes": np.array([1], dtype=np.int64)}
    got = step(layer_model(nodes, x.shape, p, x.shape, model, consts), p, x, target)
    fn = layer_fn(torch.nn.GroupNorm(g, c, eps=1e-5), lambda xt, t: xt * t["W"], weight="S", bias="B")
    compare(got, torch_step(fn, p, x, target))


@needs_torch
def test_torch_rms_norm():
    p = {"W": f32(8, 8) * 0.5, "S": f32(8) + 1}
    x, target = f32(2, 3, 8), f32(2, 3, 8, scale=0.5)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["h"]),
             helper.make_node("RMSNormalization", ["h", "S"], ["out"], epsilon=1e-6)]
    got = step(layer_model(nodes, x.shape, p, x.shape, 23), p, x, target)
    fn = layer_fn(torch.nn.RMSNorm(8, eps=1e-6), lambda xt, t: xt @ t["W"], weight="S")
    compare(got, torch_step(fn, p, x, target))


def _sdpa_case(mask_kind: str):
    """Self-attention over X (2, 5, 8) with 2 heads: Q, K, V = X Wq, X Wk, X Wv; Attention (3-D form)."""
    b, l, e, h = 2, 5, 8, 2
    p = {"Wq": f32(e, e) * 0.5, "Wk": f32(e, e, 1)[..., 0] * 0.5, "Wv": f32(e, e, 1, 1)[..., 0, 0]}
    consts: Dict[str, np.ndarray] = {}
    ins, attrs = ["q", "k", "v"], {"q_num_heads": h, "kv_num_heads": h}
    if mask_kind == "causal":
        attrs["is_causal"] = 1
    elif mask_kind == "bool mask":
        consts["M"] = np.tril(np.ones((l, l), dtype=bool)) | (np.arange(l)[None, :] == l - 1)
        ins.append("M")
    elif mask_kind == "trained float mask":
        p["M"] = f32(h, l, l)
        ins.append("M")
    nodes = [helper.make_node("MatMul", ["X", "W" + n], [n]) for n in "qkv"]
    nodes.append(helper.make_node("Attention", ins, ["out"], **attrs))
    x, target = f32(b, l, e), f32(b, l, e, scale=0.5)

    def fn(xt, t):
        def heads(z):
            return z.reshape(b, l, h, e // h).transpose(1, 2)
        q, k, v = heads(xt @ t["Wq"]), heads(xt @ t["Wk"]), heads(xt @ t["Wv"])
        mask = None
        if mask_kind == "bool mask":
            mask = torch.tensor(consts["M"])
        elif mask_kind == "trained float mask":
            mask = t["M"]
        y = TF.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask_kind == "causal")
        return y.transpose(1, 2).reshape(b, l, e)
    return nodes, p, consts, x, target, fn


@needs_torch
@pytest.mark.parametrize("mask_kind", ["none", "causal", "bool mask", "trained float mask"])
def test_torch_scaled_dot_product_attention(mask_kind):
    nodes, p, consts, x, target, fn = _sdpa_case(mask_kind)
    got = step(layer_model(nodes, x.shape, p, x.shape, 23, consts), p, x, target)
    compare(got, torch_step(fn, p, x, target))


class _ExportedBlock(torch.nn.Module if torch is not None else object):
    """Attention (causal or with a boolean mask), RMSNorm, GroupNorm and InstanceNorm as torch's
    default (dynamo) exporter writes them at opset 23: Attention, RMSNormalization,
    GroupNormalization and InstanceNormalization nodes."""

    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.rms = torch.nn.RMSNorm(8, eps=1e-6)
        self.group = torch.nn.GroupNorm(2, 4)
        self.inst = torch.nn.InstanceNorm1d(4, affine=True)
        self.mask = torch.tensor(np.tril(np.ones((5, 5), dtype=bool)) | np.eye(5, k=2, dtype=bool)) if masked else None
        with torch.no_grad():  # distinct values: the exporter merges identical initial tensors into one
            for p in self.parameters():
                p.copy_(torch.randn(p.shape) * 0.5 + (1.0 if p.ndim == 1 else 0.0))

    def forward(self, x):
        q, k, v = self.qkv(x).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        if self.mask is None:
            y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = TF.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
        y = self.rms(y.transpose(1, 2).reshape(2, 5, 8)).reshape(2, 4, 10)
        return self.group(y) + self.inst(y)


@needs_torch
@pytest.mark.parametrize("masked", [False, True], ids=["causal", "bool mask"])
def test_torch_dynamo_export_opset23_trains_like_torch(masked, tmp_path):
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    block = _ExportedBlock(masked)
    x, target = torch.randn(2, 5, 8), torch.randn(2, 4, 10)
    path = str(tmp_path / "block.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(block, (x,), path, dynamo=True, opset_version=23, external_data=False, verbose=False)
    exported = onnx.load(path)
    ops = {n.op_type for n in exported.graph.node}
    assert {"Attention", "RMSNormalization", "GroupNormalization", "InstanceNormalization"} <= ops, ops
    attention = [n for n in exported.graph.node if n.op_type == "Attention"][0]
    assert (len(attention.input) > 3 and attention.input[3]) if masked else len(attention.input) == 3
    names = {t.name for t in exported.graph.initializer}
    params = dict(block.named_parameters())
    trained = sorted(n for n in params if n in names)
    assert {"rms.weight", "group.weight", "group.bias", "inst.weight", "inst.bias"} <= set(trained), trained

    arts = artifacts.generate_artifacts(exported.SerializeToString(), requires_grad=trained,
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    loss = float(module(x.numpy(), target.numpy()))
    out = block(x)
    ref = TF.mse_loss(out, target)
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5)
    for name in trained:
        np.testing.assert_allclose(state.parameters[name].grad, params[name].grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    # the exported inference model (no step taken: torch's weights) runs in onnxruntime with torch's output
    import onnxruntime as ort
    inference = module.export_model_for_inferencing(None, [exported.graph.output[0].name])
    session = ort.InferenceSession(inference, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, out.detach().numpy(), rtol=1e-4, atol=1e-5)


@needs_torch
def test_torch_script_export_groupnorm_instancenorm_trains_like_torch(tmp_path):
    """torch.onnx.export(dynamo=False) writes nn.GroupNorm as Reshape + InstanceNormalization (with
    constant ones/zeros) + Reshape + Mul + Add, its weight and bias as (C, 1, 1) initializers."""
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.GroupNorm(2, 4),
                              torch.nn.InstanceNorm2d(4, affine=True))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape) * 0.5 + (1.0 if p.ndim == 1 else 0.0))
    x, target = torch.randn(2, 3, 5, 5), torch.randn(2, 4, 5, 5)
    path = str(tmp_path / "gn.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), path, dynamo=False, opset_version=17)
    exported = onnx.load(path)
    nodes = {n.op_type: n for n in exported.graph.node}
    assert "GroupNormalization" not in nodes and "InstanceNormalization" in nodes
    # the GroupNorm affine: the Mul and Add after the InstanceNormalization of the grouped view
    params = {"0.weight": "0.weight", "0.bias": "0.bias", "2.weight": "2.weight", "2.bias": "2.bias",
              nodes["Mul"].input[1]: "1.weight", nodes["Add"].input[1]: "1.bias"}

    arts = artifacts.generate_artifacts(exported.SerializeToString(), requires_grad=sorted(params),
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(Module(arts.training_model, state, arts.eval_model)(x.numpy(), target.numpy()))
    ref = TF.mse_loss(net(x), target)
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5)
    torch_params = dict(net.named_parameters())
    for name, torch_name in params.items():
        got = state.parameters[name].grad
        np.testing.assert_allclose(got, torch_params[torch_name].grad.numpy().reshape(got.shape), rtol=1e-4,
                                   atol=1e-5, err_msg=name)
