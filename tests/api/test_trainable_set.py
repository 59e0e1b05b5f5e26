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

from pytrain.generator import artifacts
from pytrain.generator.trainable import classify_initializers, is_exporter_constant

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
    assert summary["tied"] == [{"copy": "onnx::MatMul_9", "parameter": "table", "how": "transpose"}]
    assert "onnx::MatMul_9" not in {r["name"] for r in summary["initializers"]}
    assert summary["trainable_count"] == 3 * 24 and summary["ops"]["Transpose"] == 1
    named = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss,
                                         requires_grad=["table", "onnx::MatMul_9"]).summary
    assert named["tied"] == [] and named["trainable_count"] == 48


# ---- folded copies of a parameter (pytrain.generator.trainable.refold_parameter_copies) ---------------------------------

_FOLDED_FROM, _KIND = "pkg.onnxscript.optimizer.folded_from", "pkg.torch.export.graph_signature.InputSpec.kind"


def _dynamo_like(inits, folded_from, parameters, buffers=(), signed=()):
    """y = x + each initializer (x of shape (2, 3, 4)), written as the dynamo exporter writes folded values:
    each with its ``folded_from`` and the whole program's signature in the graph metadata (no signature: a
    TorchScript-like file)."""
    names = list(inits)
    nodes = [helper.make_node("Add", ["x" if i == 0 else "s%d" % i, n], ["y" if i == len(names) - 1 else "s%d" % (i + 1)])
             for i, n in enumerate(names)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    for name, sources in folded_from.items():
        vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(np.shape(inits[name])))
        entry = vi.metadata_props.add()
        entry.key, entry.value = _FOLDED_FROM, repr(sorted(sources))
        g.value_info.append(vi)
    for name in signed:
        vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(np.shape(inits[name])))
        entry = vi.metadata_props.add()
        entry.key, entry.value = _KIND, "PARAMETER"
        g.value_info.append(vi)
    if parameters or buffers:
        entry = g.metadata_props.add()
        entry.key = "pkg.torch.export.ExportedProgram.graph_signature"
        entry.value = "\n# inputs\n" + "".join("p_%d: PARAMETER target='%s'\n" % (i, p) for i, p in enumerate(parameters)) + \
            "".join("b_%d: BUFFER target='%s' persistent=False\n" % (i, b) for i, b in enumerate(buffers)) + \
            "x: USER_INPUT\n\n# outputs\ny: USER_OUTPUT\n"
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()


def _folded_case():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((5, 4)).astype(np.float32)
    inits = {"embedding_1": rng.standard_normal((1, 3, 4)),            # position rows 0..2 of a (16, 4) table
             "expand": np.repeat(rng.standard_normal((1, 1, 4)), 2, axis=0),   # a class token expanded to the batch
             "unsqueeze": table[[0, 2, 0]][None],                         # a table gathered with a repeated index
             "val_9": np.where(np.tril(np.ones((3, 4))) > 0, 0.0, -3.4e38)[None],   # a causal mask from buffers
             "add_3": 1.0 + rng.standard_normal((1, 1, 4)),               # 1 + weight: arithmetic, no selection
             "b": rng.standard_normal(4)}                                 # a parameter the file holds
    inits = {k: np.asarray(v, np.float32) for k, v in inits.items()}
    folded_from = {"embedding_1": ["pos.weight", "arange", "val_1"], "expand": ["cls", "val_6"],
                   "unsqueeze": ["table", "rel_index", "index", "permute"], "val_9": ["arange_2", "mask", "le"],
                   "add_3": ["norm.weight", "val_2"]}
    model = _dynamo_like(inits, folded_from, ["pos.weight", "cls", "table", "norm.weight", "b"], ["rel_index", "mask"],
                         signed=["b"])
    return model, inits


def test_folded_copies_of_a_parameter_train_as_it():
    """The dynamo exporter's folded selections of a parameter train as it: distinct rows as they are (all of
    the table the model reads), a broadcast as the parameter under its own name (Expand of it), a gather with a
    repeated index as the table's distinct entries (Gather of them, so that each entry's uses sum their
    gradients); a mask folded from buffers and a copy made by arithmetic do not train."""
    model, inits = _folded_case()
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss)
    copies = {t["copy"]: t for t in arts.summary["tied"]}
    assert {c: (t["parameter"], t["how"], t["trains_as"], t["shape"]) for c, t in copies.items()} == {
        "embedding_1": ("pos.weight", "selection", "embedding_1", [1, 3, 4]),
        "expand": ("cls", "expand", "cls", [1, 1, 4]),
        "unsqueeze": ("table", "gather", "table", [8])}
    assert sorted(arts.summary["trainable"]) == ["b", "cls", "embedding_1", "table"]
    assert arts.summary["trainable_count"] == 12 + 4 + 8 + 4
    report = {r["name"]: r for r in arts.summary["initializers"]}
    assert "folded copy of a parameter" in report["cls"]["why"] and "expand of cls" in report["cls"]["why"]
    assert not report["val_9"]["trains"] and not report["add_3"]["trains"]
    assert arts.summary["ops"]["Expand"] == 1 and arts.summary["ops"]["Gather"] == 1


def test_the_export_writes_the_parameter_and_computes_what_the_file_did():
    """Exported for inference before any step, the refolded model holds ``cls`` and ``table`` themselves and
    gives the original file's output in onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from pytrain.device.api import CheckpointState, Module

    model, inits = _folded_case()
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    out = Module(arts.training_model, state, arts.eval_model).export_model_for_inferencing(None, ["y"])
    exported = {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(out).graph.initializer}
    np.testing.assert_array_equal(exported["cls"], inits["expand"][:1])
    assert exported["table"].shape == (8,) and "unsqueeze" not in exported and "expand" not in exported
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    run = [ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0] for m in (model, out)]
    np.testing.assert_array_equal(run[1], run[0])


def test_equal_entries_tie_only_when_they_repeat_as_rows():
    """Entries equal by chance in distinct rows stay a selection; ties among half-precision values, an all-zero
    table (Swin's before training) and a TorchScript folded copy whose rows are distinct are left as the file
    has them; TorchScript's folded gather (``onnx::Add_<n>``, no metadata) becomes a Gather of its entries."""
    rng = np.random.default_rng(2)
    chance = rng.standard_normal((1, 3, 4))
    chance[0, 2, 1] = chance[0, 0, 3]
    half = rng.standard_normal((5, 4)).astype(np.float16).astype(np.float32)[[0, 2, 0]][None]
    inits = {"embedding_1": chance, "unsqueeze": half, "unsqueeze_1": np.zeros((1, 3, 4)), "b": np.ones(4)}
    folded_from = {"embedding_1": ["pos.weight"], "unsqueeze": ["t1", "index"], "unsqueeze_1": ["t2", "index"]}
    summary = artifacts.generate_artifacts(_dynamo_like(inits, folded_from, ["pos.weight", "t1", "t2", "b"],
                                                        signed=["b"]), loss=artifacts.LossType.MSELoss).summary
    assert [(t["copy"], t["how"]) for t in summary["tied"]] == [("embedding_1", "selection")]
    assert summary["trainable"] == ["embedding_1", "b"]
    table = rng.standard_normal((5, 4))
    ts = {"onnx::Add_7": table[[1, 1, 3]][None], "onnx::Add_8": rng.standard_normal((1, 3, 4))}
    summary = artifacts.generate_artifacts(_dynamo_like(ts, {}, []), loss=artifacts.LossType.MSELoss).summary
    assert [(t["copy"], t["how"], t["trains_as"], t["shape"]) for t in summary["tied"]] == [
        ("onnx::Add_7", "gather", "onnx::Add_7/entries", [8])]
    assert sorted(summary["trainable"]) == ["onnx::Add_7/entries", "onnx::Add_8"]


def test_the_vectors_hash_rules_out_only_axes_whose_vectors_are_all_distinct():
    """``_rows_repeat`` skips sorting an axis's vectors when their exact bit hashes differ: on repeated rows (with
    -0.0 beside 0.0), chance-equal entries, broadcasts and float16/float64 values it answers as the plain sort of
    every axis's vectors does, and ``_distinct`` counts as ``np.unique`` (NaNs one value)."""
    from pytrain.generator import trainable

    def plain(values, distinct):
        for d in range(values.ndim):
            size = values.shape[d]
            if size >= 2:
                rows = np.moveaxis(values, d, -1).reshape(-1, size)
                unique = np.unique(rows, axis=0).shape[0]
                if unique < rows.shape[0] and distinct == unique * size:
                    return True
        return False

    rng = np.random.default_rng(5)
    cases = []
    for dtype in (np.float32, np.float64, np.float16):
        table = rng.standard_normal((6, 4)).astype(dtype)
        cases.append(table[[0, 3, 3, 1]])                       # a gather's repeated rows
        cases.append(table[[2, 2, 5]].T.copy())                 # repeated along the other axis
        signed = table[[1, 4, 1]].copy()
        signed[0, signed[0] == 0] = 0
        signed[2, 0], signed[0, 0] = -0.0, 0.0                  # equal rows that differ in zero's sign
        cases.append(signed)
        chance = rng.standard_normal((3, 5, 4)).astype(dtype)
        chance[1, 2, 3] = chance[0, 0, 0]                       # one entry equal by chance
        cases.append(chance)
        cases.append(np.broadcast_to(table[:1], (3, 4)).copy())
    for values in cases:
        distinct = np.unique(values.ravel()).size
        assert trainable._distinct(values.ravel()) == distinct
        assert trainable._rows_repeat(values, distinct) == plain(values, distinct), values
    assert trainable._distinct(np.array([np.nan, 1.0, np.nan, -0.0, 0.0])) == 3
