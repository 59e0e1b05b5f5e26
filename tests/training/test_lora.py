"""LoRA on an ONNX model (``generate_artifacts(..., lora=LoRA(...))``) against ``peft`` on the same targets:
a torch MLP (Gemm with transB=1) and a tiny GPT-2 (Conv1D as Gemm with W stored (in, out), the untied
``lm_head`` as MatMul), exported with the TorchScript exporter, and a tiny BERT classifier exported by
``pytrain.torch_export`` (query/value as MatMul by a Transpose of the (out, in) weight). From identical
adapters (peft's lora_A copied into pytrain's checkpoint, lora_B zero on both sides) 5 SGD steps give peft's
losses and adapters, only the adapters train and the base weights stay bit-identical; the merged export equals
peft's ``merge_and_unload()`` model in onnxruntime; the adapters alone round-trip (.npz, and .onnx re-merging to
the same export); wrong targets are refused."""
from __future__ import annotations

import copy
import io
import warnings

import numpy as np
import pytest

import pytrain

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from torch_zoo import CASES as ZOO, stub_torchvision_ops  # noqa: E402

stub_torchvision_ops()   # peft imports transformers, which imports torchvision
peft = pytest.importorskip("peft")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pytrain.generator import artifacts  # noqa: E402
from pytrain.device.api import CheckpointState  # noqa: E402
from pytrain.errors import ArtifactError, CheckpointError, ModelFormatError  # noqa: E402
from pytrain.engine.lora import LoRA, load_adapters, save_adapters  # noqa: E402
from pytrain.device.module import Module  # noqa: E402
from train_helpers import train_steps  # noqa: E402

nn = torch.nn
STEPS, BATCH, SEQ, VOCAB, HIDDEN = 5, 4, 8, 40, 32


class Logits(nn.Module):
    """GPT-2 called with input_ids and attention_mask, its logits as (N, vocab, T) for cross entropy."""

    def __init__(self, hf: nn.Module) -> None:
        super().__init__()
        self.hf = hf

    def forward(self, input_ids, attention_mask):
        return self.hf(input_ids=input_ids, attention_mask=attention_mask).logits.transpose(1, 2)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 4))


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=2, n_positions=2 * SEQ, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False, attn_implementation="eager")
    return Logits(GPT2LMHeadModel(cfg)).eval()


def _bert() -> nn.Module:
    return ZOO["bert"].build().eval()


def _batches(kind: str):
    if kind == "bert":
        return ZOO["bert"].batches(STEPS)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(STEPS):
        if kind == "mlp":
            x = rng.standard_normal((BATCH, 16)).astype(np.float32)
            out.append((x, (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)))
        else:
            ids = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64)
            mask = np.ones((BATCH, SEQ), np.int64)
            mask[1, SEQ - 2:] = 0
            out.append(((ids, mask), ((ids * 7 + 3) % VOCAB).astype(np.int64)))
    return out


#: kind -> (model builder, pytrain targets, peft target_modules, input names, lr)
CASES = {
    "mlp": (_mlp, ["0", "4"], ["0", "4"], ["input"], 0.5),
    "gpt2": (_gpt2, ["c_attn", "lm_head"], ["c_attn", "lm_head"], ["input_ids", "attention_mask"], 0.5),
    "bert": (_bert, ["query", "value"], ["query", "value"], ["input_ids", "attention_mask"], 0.5),
}


def _export(model: nn.Module, args, names, kind: str = "") -> bytes:
    if kind == "bert":   # pytrain's own exporter: state_dict names, Linear as MatMul by Transpose(W)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pytrain.torch_export(model, tuple(torch.from_numpy(a) for a in args), None,
                                        input_names=list(names), output_names=["output"])
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(torch.from_numpy(a) for a in args), f, input_names=list(names),
                          output_names=["output"], dynamic_axes={n: {0: "N"} for n in list(names) + ["output"]},
                          dynamo=False)
    return f.getvalue()


def _peft_model(model: nn.Module, targets, rank: int, alpha: float):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fan_in_fan_out set per layer (GPT-2's Conv1D)
        return get_peft_model(copy.deepcopy(model), config)


def _peft_adapter(peft_model, weight: str, which: str) -> torch.Tensor:
    """peft's lora_A/lora_B of the module owning ONNX weight ``weight`` (a state_dict name, or the node's
    module for an exporter-named transposed copy)."""
    module = weight[:-len(".weight")]
    return dict(peft_model.named_parameters())["base_model.model.%s.%s.default.weight" % (module, which)]


def _module_of(adapter, source: onnx.ModelProto) -> str:
    """The torch module path of an adapted ONNX weight: its own name, or its node's (``/hf/lm_head/MatMul``)."""
    if not adapter["weight"].startswith("onnx::"):
        return adapter["weight"]
    return ".".join(adapter["node"].strip("/").split("/")[:-1]) + ".weight"


def _setup(kind: str, rank: int = 4, alpha: float = 8.0):
    make, targets, peft_targets, names, lr = CASES[kind]
    model = make()
    batches = _batches(kind)
    source = _export(model, batches[0][0] if isinstance(batches[0][0], tuple) else (batches[0][0],), names, kind)
    arts = artifacts.generate_artifacts(source, lora=LoRA(rank, alpha, targets), optimizer=artifacts.SGD())
    peft_model = _peft_model(model, peft_targets, rank, alpha)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    src = onnx.load_from_string(source)
    for a in arts.summary["lora"]["adapters"]:   # identical start: peft's lora_A into pytrain's checkpoint
        weight = _module_of(a, src)
        for which in ("lora_A", "lora_B"):
            np.copyto(state.parameters[a[which]].data, _peft_adapter(peft_model, weight, which).detach().numpy())
    return arts, state, peft_model, batches, lr, src


def _peft_steps(peft_model, batches, lr: float):
    opt = torch.optim.SGD([p for p in peft_model.parameters() if p.requires_grad], lr=lr)
    peft_model.train()
    losses = []
    for x, y in batches:
        opt.zero_grad()
        xs = x if isinstance(x, tuple) else (x,)
        loss = nn.functional.cross_entropy(peft_model(*(torch.from_numpy(a) for a in xs)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture(scope="module", params=sorted(CASES))
def trained(request):
    arts, state, peft_model, batches, lr, src = _setup(request.param)
    losses, state = train_steps(arts, batches, lr=lr, state=state)
    peft_losses = _peft_steps(peft_model, batches, lr)
    return {"kind": request.param, "arts": arts, "state": state, "peft": peft_model, "batches": batches,
            "losses": losses, "peft_losses": peft_losses, "src": src}


def test_sgd_steps_equal_peft_losses_and_adapters(trained):
    np.testing.assert_allclose(trained["losses"], trained["peft_losses"], rtol=1e-4)
    for a in trained["arts"].summary["lora"]["adapters"]:
        weight = _module_of(a, trained["src"])
        for which in ("lora_A", "lora_B"):
            ours = trained["state"].parameters[a[which]].data
            np.testing.assert_allclose(ours, _peft_adapter(trained["peft"], weight, which).detach().numpy(),
                                       rtol=1e-4, atol=1e-6)
        assert np.abs(trained["state"].parameters[a["lora_B"]].data).max() > 0  # B moved off zero


def test_only_the_adapters_train_and_base_weights_stay_bit_identical(trained):
    adapters = {n for a in trained["arts"].summary["lora"]["adapters"] for n in (a["lora_A"], a["lora_B"])}
    assert set(trained["arts"].summary["trainable"]) == adapters
    assert {n for n, p in trained["state"].parameters.items() if p.requires_grad} == adapters
    module = Module(trained["arts"].training_model, trained["state"], trained["arts"].eval_model)
    unmerged = onnx.load_from_string(module.export_model_for_inferencing(None, ["output"], merge_adapters=False))
    kept = {t.name: numpy_helper.to_array(t) for t in unmerged.graph.initializer}
    for t in trained["src"].graph.initializer:
        if t.name in kept:
            assert numpy_helper.to_array(t).tobytes() == kept[t.name].tobytes(), t.name
    for a in trained["arts"].summary["lora"]["adapters"]:
        assert a["weight"] in kept


def test_merged_export_equals_peft_merge_and_unload_in_onnxruntime(trained):
    module = Module(trained["arts"].training_model, trained["state"], trained["arts"].eval_model)
    merged = module.export_model_for_inferencing(None, ["output"])
    model = onnx.load_from_string(merged)
    # a plain model with the original graph: the source's nodes, no adapter tensors
    assert sorted(n.name for n in model.graph.node) == sorted(n.name for n in trained["src"].graph.node)
    assert not [t.name for t in model.graph.initializer if "lora" in t.name]
    reference = copy.deepcopy(trained["peft"]).merge_and_unload().eval()
    x, _ = trained["batches"][0]
    xs = x if isinstance(x, tuple) else (x,)
    with torch.no_grad():
        expected = reference(*(torch.from_numpy(a) for a in xs)).numpy()
    session = ort.InferenceSession(merged, providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), xs)})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_adapters_alone_round_trip_through_npz(trained):
    state = trained["state"]
    blob = save_adapters(state)
    with np.load(io.BytesIO(blob)) as z:
        names = [n for n in z.files if n != "pytrain.lora"]
        assert set(names) == {n for n, p in state.parameters.items() if p.requires_grad}
        averaged = {n: z[n] * 0.5 for n in names}   # what a federation's mean of two devices could send back
    out = io.BytesIO()
    np.savez(out, **averaged, **{"pytrain.lora": np.asarray(state.properties["pytrain.lora"])})
    fresh = CheckpointState.load_checkpoint(trained["arts"].checkpoint)
    load_adapters(fresh, out.getvalue())
    for n, v in averaged.items():
        np.testing.assert_array_equal(fresh.parameters[n].data, v)


def test_adapters_alone_as_onnx_load_back_losslessly_and_re_merge_to_the_merged_export(trained, tmp_path):
    state, arts = trained["state"], trained["arts"]
    path = tmp_path / "adapters.onnx"
    save_adapters(state, path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    adapters = {n: p.data for n, p in state.parameters.items() if p.requires_grad}
    assert not model.graph.node and sorted(o.name for o in model.graph.output) == sorted(adapters)
    assert path.stat().st_size < sum(a.nbytes for a in adapters.values()) + 4096   # the adapters and little else
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])   # it runs: returns the adapters
    for o, value in zip(session.get_outputs(), session.run(None, {})):
        assert value.tobytes() == adapters[o.name].tobytes()
    fresh = CheckpointState.load_checkpoint(arts.checkpoint)   # the base model with its untrained adapters
    load_adapters(fresh, str(path))
    for n, v in adapters.items():
        assert fresh.parameters[n].data.tobytes() == v.tobytes()
    merged = [Module(arts.training_model, s, arts.eval_model).export_model_for_inferencing(None, ["output"])
              for s in (state, fresh)]
    assert merged[0] == merged[1]


def test_initial_lora_a_is_peft_kaiming_uniform_from_the_seed_and_b_zero():
    source = _export(_mlp(), (np.zeros((2, 16), np.float32),), ["input"])
    first, again, other = (CheckpointState.load_checkpoint(artifacts.generate_artifacts(
        source, lora=LoRA(8, targets=["0"], seed=s)).checkpoint) for s in (0, 0, 1))
    a = first.parameters["0.lora_A"].data
    assert a.shape == (8, 16) and first.parameters["0.lora_B"].data.shape == (HIDDEN, 8)
    assert np.abs(a).max() <= 1 / np.sqrt(16) and np.abs(a).max() > 0.8 / np.sqrt(16)
    assert not first.parameters["0.lora_B"].data.any()
    np.testing.assert_array_equal(a, again.parameters["0.lora_A"].data)
    assert not np.array_equal(a, other.parameters["0.lora_A"].data)


# ---------------------------------------------------------------- refusals

def _tiny(weight_shape, second_operand_is_weight=True) -> bytes:
    """x (N, 2, 3) @ W, then + bias: a MatMul whose weight can be bent into what LoRA refuses."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones(weight_shape, np.float32), "fc.weight")
    b = numpy_helper.from_array(np.ones((4,), np.float32), "fc.bias")
    inputs = [x]
    if not second_operand_is_weight:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 4]))
    mm = helper.make_node("MatMul", ["x", "fc.weight" if second_operand_is_weight else "z"], ["h"], name="/fc/MatMul")
    add = helper.make_node("Add", ["h", "fc.bias"], ["y"], name="/fc/Add")
    graph = helper.make_graph([mm, add], "g", inputs, [y], [w, b] if second_operand_is_weight else [b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("lora, message", [
    (lambda: LoRA(4, targets=["nothing_here"]), "matches no MatMul/Gemm node or weight"),
    (lambda: LoRA(4, targets=["fc.bias"]), "not the weight operand of a MatMul or Gemm"),
])
def test_refuses_a_target_that_selects_no_weight(lora, message):
    with pytest.raises(ArtifactError, match=message):
        artifacts.generate_artifacts(_tiny((3, 4)), loss=None, lora=lora())


def test_refuses_adapters_of_another_model_and_a_file_that_is_neither_format(tmp_path):
    source = _export(_mlp(), (np.zeros((2, 16), np.float32),), ["input"])
    narrow, wide = (CheckpointState.load_checkpoint(artifacts.generate_artifacts(
        source, lora=LoRA(r, targets=["0"])).checkpoint) for r in (2, 4))
    with pytest.raises(CheckpointError, match=r"adapter '0.lora_A' has shape \[4, 16\] in the file, \[2, 16\]"):
        load_adapters(narrow, save_adapters(wide, format="onnx"))
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelFormatError, match="LoRA adapters file .*junk.onnx"):
        load_adapters(narrow, str(tmp_path / "junk.onnx"))


def test_refuses_a_weight_that_is_not_2d():
    with pytest.raises(ArtifactError, match=r"'fc.weight' .* is 3-D"):
        artifacts.generate_artifacts(_tiny((2, 3, 4)), loss=None, lora=LoRA(2, targets=["fc"]))


def _transposed(shared: bool) -> bytes:
    """x (N, 3) @ Transpose(W) with W (4, 3) stored (out, in), as pytrain.torch_export writes a Linear; with
    ``shared`` the transposed weight is read by an Add too."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in (["y", "z"] if shared else ["y"])]
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "fc.weight")
    nodes = [helper.make_node("Transpose", ["fc.weight"], ["wt"], name="/fc/Transpose", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"], name="/fc/MatMul")]
    if shared:
        nodes.append(helper.make_node("Add", ["wt", "wt"], ["z"], name="/other/Add"))
    graph = helper.make_graph(nodes, "g", [x], outs, [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_weight_behind_a_transpose_takes_an_adapter_in_its_out_in_layout_unless_the_transpose_is_shared():
    arts = artifacts.generate_artifacts(_transposed(False), loss=None, lora=LoRA(2, targets=["fc.weight"]))
    (adapter,) = arts.summary["lora"]["adapters"]
    assert adapter["weight"] == "fc.weight" and adapter["layout"] == "out_in"
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    assert state.parameters["fc.lora_A"].data.shape == (2, 3) and state.parameters["fc.lora_B"].data.shape == (4, 2)
    with pytest.raises(ArtifactError, match="multiplies by 'wt', which the graph computes"):
        artifacts.generate_artifacts(_transposed(True), loss=None, lora=LoRA(2, targets=["/fc/MatMul"]))


def test_refuses_a_matmul_of_two_computed_tensors():
    with pytest.raises(ArtifactError, match="multiplies by 'z', which the graph computes"):
        artifacts.generate_artifacts(_tiny((3, 4), second_operand_is_weight=False), loss=None,
                                     lora=LoRA(2, targets=["/fc/MatMul"]))


@pytest.mark.parametrize("rank", [0, -1, 2.5, True])
def test_refuses_a_rank_that_is_not_a_positive_integer(rank):
    with pytest.raises(ArtifactError, match="rank must be a positive integer"):
        LoRA(rank, targets=["fc"])


def test_refuses_lora_with_trainable_ops():
    with pytest.raises(ArtifactError, match="trainable_ops"):
        artifacts.generate_artifacts(_tiny((3, 4)), loss=None, lora=LoRA(2, targets=["fc"]), trainable_ops=1)


def test_dropout_on_the_adapter_input_trains_and_is_gone_from_the_export():
    source = _export(_mlp(), (np.zeros((2, 16), np.float32),), ["input"])
    arts = artifacts.generate_artifacts(source, lora=LoRA(4, 8, targets=["0"], dropout=0.5), optimizer=artifacts.SGD())
    losses, state = train_steps(arts, _batches("mlp"), lr=0.5)
    assert np.isfinite(losses).all() and np.abs(state.parameters["0.lora_B"].data).max() > 0
    module = Module(arts.training_model, state, arts.eval_model)
    unmerged = module.export_model_for_inferencing(None, ["output"], merge_adapters=False)
    assert "Dropout" not in {n.op_type for n in onnx.load_from_string(unmerged).graph.node}
    x = _batches("mlp")[0][0]
    outs = [ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
            for m in (unmerged, module.export_model_for_inferencing(None, ["output"]))]
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)
