"""The default trainable set is what PyTorch trains: with requires_grad=None the
number of trainable elements equals sum(p.numel() for p in model.parameters()) for models exported
by either exporter (dynamo, torch's default, and TorchScript), in eval and training mode, with and
without constant folding; constants the exporters fold (``val_68``, ``/attn/Sqrt_output_0``) do not
train, transposed copies of a parameter do. The summary says for each initializer why."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytrain import artifacts
from pytrain.trainable import classify_initializers, is_exporter_constant

torch = pytest.importorskip("torch")
nn = torch.nn


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.c(x))).mean((2, 3)))


class MHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)

    def forward(self, x):
        return self.enc(x)


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)), (4, 5)),
    "conv_bn": (ConvBN, (4, 3, 6, 6)),
    "mha": (MHA, (4, 5, 16)),
    "encoder": (Encoder, (4, 5, 16)),
}


def _build(name: str):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    with torch.no_grad():  # distinct values: the exporters merge identical initial tensors
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model, torch.randn(*shape)


def _export(model, x, dynamo: bool, mode: str, fold: bool, path: str) -> None:
    model.train(mode == "train")
    kw = {"dynamo": dynamo}
    if dynamo:
        kw["optimize"] = fold
    else:
        kw["do_constant_folding"] = fold
        kw["training"] = torch.onnx.TrainingMode.TRAINING if mode == "train" else torch.onnx.TrainingMode.EVAL
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), path, **kw)
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("fold", [True, False], ids=["folded", "unfolded"])
@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_trainable_elements_equal_torch_parameters(name, dynamo, mode, fold, tmp_path):
    model, x = _build(name)
    path = os.path.join(str(tmp_path), "m.onnx")
    _export(model, x, dynamo, mode, fold, path)
    arts = artifacts.generate_artifacts(path, loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD)
    want = sum(p.numel() for p in model.parameters())
    import onnx
    src = onnx.load(path)
    kept_bn = any(n.op_type == "BatchNormalization" for n in src.graph.node)
    if name == "conv_bn" and not kept_bn:
        # the exporter folded BatchNorm into the convolution (its scale and bias are gone;
        # pytrain.torch_export keeps them); every parameter that survived trains
        want -= sum(p.numel() for p in model.bn.parameters())
    assert arts.summary["trainable_count"] == want
    report = {r["name"]: r for r in arts.summary["initializers"]}
    assert set(report) == {t.name for t in src.graph.initializer}
    assert all(r["why"] for r in report.values())
    for r in report.values():  # the summary agrees with what trains
        assert r["trains"] == (r["name"] in arts.summary["trainable"])


def test_dynamo_constants_and_transposed_copies(tmp_path):
    model, x = _build("encoder")
    path = os.path.join(str(tmp_path), "m.onnx")
    _export(model, x, True, "eval", True, path)
    report = {r["name"]: r for r in artifacts.generate_artifacts(path).summary["initializers"]}
    scalars = [r for r in report.values() if r["name"].startswith("val_") and r["shape"] == [1]
               and not r["why"].startswith("not a float")]  # the attention scale, as val_68
    assert scalars and all(not r["trains"] and "folded by the exporter" in r["why"] for r in scalars)
    copies = [r for r in report.values() if r["name"].startswith("val_") and r["shape"] == [16, 48]]
    assert copies and all(r["trains"] and "MatMul" in r["why"] for r in copies)  # in_proj_weight, transposed


def _graph(nodes, inits, outputs=("y",)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_rule_on_a_hand_built_graph():
    f = np.float32
    nodes = [helper.make_node("Transpose", ["W0"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["h"]),                      # W0 via a layout op: a weight
             helper.make_node("Add", ["h", "bias"], ["hb"]),                        # a bias named by the user
             helper.make_node("Mul", ["hb", "/attn/Sqrt_2_output_0"], ["hs"]),      # TorchScript folded scale
             helper.make_node("Mul", ["hs", "val_7"], ["hv"]),                      # dynamo constant
             helper.make_node("Mul", ["hv", "half"], ["hh"]),                       # rank-0 constant
             helper.make_node("Add", ["hh", "onnx::Add_9"], ["ha"]),                # one-element anonymous constant
             helper.make_node("Reshape", ["ha", "shape"], ["y"])]                   # int64: not float
    inits = {"W0": np.ones((3, 4), f), "bias": np.ones(3, f), "/attn/Sqrt_2_output_0": np.array([0.5], f),
             "val_7": np.array([2.0], f), "half": np.array(0.5, f), "onnx::Add_9": np.array([1.0], f),
             "shape": np.array([2, 3], np.int64)}
    arts = artifacts.generate_artifacts(_graph(nodes, inits).SerializeToString(), loss=artifacts.LossType.MSELoss)
    report = {r["name"]: r for r in arts.summary["initializers"]}
    assert arts.summary["trainable"] == ["W0", "bias"]
    assert "Transpose" not in report["W0"]["why"] and "MatMul" in report["W0"]["why"]
    for name in ("/attn/Sqrt_2_output_0", "val_7", "onnx::Add_9"):
        assert not report[name]["trains"] and "folded by the exporter" in report[name]["why"], name
    assert "rank 0" in report["half"]["why"] and "not a float" in report["shape"]["why"]
    # explicit choices are reported as such
    arts = artifacts.generate_artifacts(_graph(nodes, inits).SerializeToString(), loss=artifacts.LossType.MSELoss,
                                        requires_grad=["W0", "val_7"])
    report = {r["name"]: r for r in arts.summary["initializers"]}
    assert report["val_7"]["trains"] and "requires_grad" in report["val_7"]["why"]
    assert not report["bias"]["trains"] and report["bias"]["why"] == "not in requires_grad"


def test_exporter_constant_names():
    assert is_exporter_constant("val_69", 1) and is_exporter_constant("val_0", 768)
    assert is_exporter_constant("/enc/self_attn/Sqrt_2_output_0", 1)
    assert is_exporter_constant("onnx::Mul_45", 1) and not is_exporter_constant("onnx::MatMul_103", 768)
    assert not is_exporter_constant("fc.weight", 1) and not is_exporter_constant("value_1", 1)


def test_signature_metadata_wins():
    """The dynamo exporter's graph signature marks buffers: a buffer feeding Add does not train."""
    nodes = [helper.make_node("Add", ["x", "pe"], ["y"])]
    model = _graph(nodes, {"pe": np.ones((2, 4), np.float32)})
    vi = helper.make_tensor_value_info("pe", TensorProto.FLOAT, [2, 4])
    entry = vi.metadata_props.add()
    entry.key, entry.value = "pkg.torch.export.graph_signature.InputSpec.kind", "BUFFER"
    model.graph.value_info.append(vi)
    from pytrain.proto import ModelProto
    m = ModelProto.FromString(model.SerializeToString())
    report = classify_initializers(m.graph.node, m.graph.initializer, m.graph.value_info)
    assert report[0]["trains"] is False and "buffer" in report[0]["why"]


def test_signature_decides_what_the_exporter_computed():
    """Where a graph signature exists, an initializer it does not list is one the exporter computed:
    it trains as a parameter's layout copy (a transposed weight feeding MatMul), never otherwise (a
    folded mask added to the scores, even under a name that looks like a user's)."""
    f = np.float32
    nodes = [helper.make_node("MatMul", ["x", "wt"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Add", ["hb", "where"], ["y"])]
    model = _graph(nodes, {"wt": np.ones((4, 3), f), "b": np.ones(3, f), "where": np.zeros((2, 3), f)})
    vi = helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])
    entry = vi.metadata_props.add()
    entry.key, entry.value = "pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER"
    model.graph.value_info.append(vi)
    from pytrain.proto import ModelProto
    m = ModelProto.FromString(model.SerializeToString())
    report = {r["name"]: r for r in classify_initializers(m.graph.node, m.graph.initializer, m.graph.value_info)}
    assert report["b"]["trains"] and "graph signature" in report["b"]["why"]
    assert report["wt"]["trains"] and "MatMul" in report["wt"]["why"]
    assert not report["where"]["trains"] and "not in its graph signature" in report["where"]["why"]
    # without a signature (TorchScript) the same tensor looks like a bias: rule 7
    plain = ModelProto.FromString(_graph(nodes, {"wt": np.ones((4, 3), f), "b": np.ones(3, f),
                                                 "where": np.zeros((2, 3), f)}).SerializeToString())
    assert all(r["trains"] for r in classify_initializers(plain.graph.node, plain.graph.initializer))


def test_inspect_says_what_trains_and_why(tmp_path, capsys):
    from pytrain.cli import main

    model, x = _build("encoder")
    path = os.path.join(str(tmp_path), "m.onnx")
    _export(model, x, True, "eval", True, path)
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "trains by default: " in out and "{:,} values".format(sum(p.numel() for p in model.parameters())) in out
    assert "constant folded by the exporter" in out or "... and" in out
    assert "trains  a PyTorch parameter (the exporter's graph signature)" in out


class ScaledHead(nn.Module):
    """A rank-0 parameter (CLIP's logit_scale) next to buffers feeding arithmetic (a positional table)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.logit_scale = nn.Parameter(torch.tensor(2.5))
        self.register_buffer("eps", torch.tensor(1e-5))
        self.register_buffer("pe", torch.randn(3))

    def forward(self, x):
        y = self.fc(x) * self.logit_scale.exp() + self.eps
        return torch.sqrt(y * y + 0.5) * 0.25 + self.pe


def test_dynamo_graph_signature_tells_parameters_from_buffers(tmp_path):
    """Without constant folding the dynamo exporter keeps logit_scale and records which initializers
    are parameters and which buffers: the rank-0 parameter trains, the buffers do not (a
    TorchScript export records nothing, and pe would look like a bias: README, What trains by default)."""
    torch.manual_seed(0)
    model = ScaledHead()
    path = os.path.join(str(tmp_path), "m.onnx")
    _export(model, torch.randn(2, 4), True, "eval", False, path)
    arts = artifacts.generate_artifacts(path, loss=artifacts.LossType.MSELoss)
    report = {r["name"]: r for r in arts.summary["initializers"]}
    assert arts.summary["trainable_count"] == sum(p.numel() for p in model.parameters())
    assert report["logit_scale"]["trains"] and "graph signature" in report["logit_scale"]["why"]
    assert not report["pe"]["trains"] and "buffer" in report["pe"]["why"]
    assert not report["eps"]["trains"]


def test_tied_copy_is_read_from_its_parameter():
    """An exporter's transposed copy of a parameter that trains (a tied lm_head: Gather reads the table,
    MatMul its transpose ``onnx::MatMul_9``) becomes a Transpose of the parameter, so one tensor trains; a
    copy that differs, one of a single value (zeros), and one the caller names stay initializers."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 4)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "onnx::MatMul_9"], ["logits"]),
             helper.make_node("MatMul", ["e", "val_3"], ["h"]),
             helper.make_node("MatMul", ["e", "val_4"], ["z"]),
             helper.make_node("Add", ["logits", "h"], ["s"]), helper.make_node("Add", ["s", "z"], ["y"])]
    inits = {"table": table, "onnx::MatMul_9": table.T.copy(), "val_3": table.T + 1e-3,
             "val_4": np.zeros((4, 6), np.float32)}
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 6])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    summary = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss).summary
    assert summary["tied"] == [{"copy": "onnx::MatMul_9", "parameter": "table"}]
    assert "onnx::MatMul_9" not in {r["name"] for r in summary["initializers"]}
    assert summary["trainable_count"] == 3 * 24 and summary["ops"]["Transpose"] == 1
    named = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss,
                                         requires_grad=["table", "onnx::MatMul_9"]).summary
    assert named["tied"] == [] and named["trainable_count"] == 48
