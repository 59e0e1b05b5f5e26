"""Quantized models as transformers.js ships them, and LoRA on them (QLoRA-style; docs/quantized.md).

A tiny GPT-2 (``pytrain.torch_export``, the session's ``lm``) quantized as transformers.js' q8 files are
(``quantize_dynamic(weight_type=QInt8, MatMulConstBOnly)``: DynamicQuantizeLinear -> MatMulInteger blocks) and as
q4 (onnxruntime's MatMul4BitsQuantizer, symmetric 4-bit blocks of 16: MatMulNBits; its Gemm layers written as
MatMul + Add first, since the quantizer takes MatMul only; the token table stays float: quantized, it becomes a
GatherBlockQuantized of int4 data, an element type pytrain refuses by name).

* Inference equals onnxruntime. For q8 the exact oracle is onnxruntime on the same file with each MatMulInteger
  written as an int32 MatMul: onnxruntime's own AVX2 uint8 x int8 kernel saturates int16 pair sums
  (tests/ops/test_quantization_ops.py), so against plain onnxruntime the logits differ by what a few saturated
  sums and the activation roundings they flip move (measured < 2% of the logits' range here).
* LoRA on the quantized base lowers the loss; the base stays quantized (its int8 / packed bytes untouched); the
  adapter gradient through the dequantized weights equals the gradient LoRA takes on the float model holding
  those dequantized weights, within what the activations' rounding moves (straight-through).
* The exports: adapters kept as nodes run in onnxruntime with pytrain's own logits; merged into float layers;
  merged and requantized (distances from the float merge measured and bounded)."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from quant_oracle import exact_integer_matmuls, ort_run  # noqa: E402

from pytrain.generator import artifacts  # noqa: E402
from pytrain.device.api import CheckpointState, Module, Optimizer  # noqa: E402
from pytrain.engine.lora import LoRA  # noqa: E402
from pytrain.generator.losses import CausalLMLoss  # noqa: E402
from pytrain.engine.runtime import InferenceSession  # noqa: E402

TARGETS = ["c_attn", "c_proj", "c_fc"]   # every quantized layer of the tiny GPT-2
BATCH = 2


def _ids(seed: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, vocab, (BATCH, 16)).astype(np.int64)


def gemm_as_matmul(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """Each Gemm(x, W, b) (alpha = beta = 1, no transposes) as MatMul(x, W) + b, as a MatMul exporter writes it."""
    nodes = []
    for n in model.graph.node:
        if n.op_type != "Gemm":
            nodes.append(n)
            continue
        assert all(a.name in ("alpha", "beta") and a.f == 1.0 for a in n.attribute), n.name
        mid = n.output[0] + "_mm"
        nodes += [helper.make_node("MatMul", n.input[:2], [mid], name=n.name.replace("Gemm", "MatMul")),
                  helper.make_node("Add", [mid, n.input[2]], [n.output[0]], name=n.name.replace("Gemm", "Add"))]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


@pytest.fixture(scope="module")
def models(lm, tmp_path_factory):
    """{"f32", "q8", "q4"}: the tiny GPT-2's bytes, float and quantized as transformers.js' files are."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    d = tmp_path_factory.mktemp("quantized")
    f32 = os.path.join(d, "model.onnx")
    with open(f32, "wb") as f:
        f.write(lm.onnx)
    quantize_dynamic(f32, os.path.join(d, "q8.onnx"), weight_type=QuantType.QInt8,
                     extra_options={"MatMulConstBOnly": True})
    q = MatMulNBitsQuantizer(gemm_as_matmul(onnx.load_from_string(lm.onnx)), algo_config=DefaultWeightOnlyQuantConfig(
        block_size=16, is_symmetric=True, op_types_to_quantize=("MatMul",)))
    q.process()
    with open(os.path.join(d, "q8.onnx"), "rb") as f:
        q8 = f.read()
    return {"f32": lm.onnx, "q8": q8, "q4": q.model.model.SerializeToString(), "vocab": lm.vocab_size}


def _ops(blob: bytes):
    return {(n.domain, n.op_type) for n in onnx.load_from_string(blob).graph.node}


# ---- inference ----------------------------------------------------------------------------------------------
def test_quantized_files_hold_the_quantized_ops(models):
    assert {("", "DynamicQuantizeLinear"), ("", "MatMulInteger"), ("", "DequantizeLinear")} <= _ops(models["q8"])
    assert ("com.microsoft", "MatMulNBits") in _ops(models["q4"])


def test_q8_inference_equals_onnxruntime(models):
    exact = exact_integer_matmuls(onnx.load_from_string(models["q8"]))
    worst = 0.0
    for seed in range(3):
        feeds = {"input_ids": _ids(seed, models["vocab"])}
        got = InferenceSession(models["q8"]).run(None, feeds)[0]
        np.testing.assert_allclose(got, ort_run(exact, feeds), rtol=1e-5, atol=1e-5)
        plain = ort_run(models["q8"], feeds)
        worst = max(worst, float(np.abs(got - plain).max() / np.ptp(plain)))
    print("q8 logits against plain onnxruntime: %.2g of their range" % worst)
    assert worst < 0.02, worst


def test_q4_inference_equals_onnxruntime(models):
    for seed in range(2):
        feeds = {"input_ids": _ids(seed, models["vocab"])}
        np.testing.assert_allclose(InferenceSession(models["q4"]).run(None, feeds)[0], ort_run(models["q4"], feeds),
                                   rtol=1e-5, atol=1e-5)


# ---- LoRA on the quantized base -----------------------------------------------------------------------------
STEPS, LR = 6, 0.5


def _generate(blob: bytes):
    return artifacts.generate_artifacts(blob, lora=LoRA(4, 8.0, TARGETS), loss=CausalLMLoss(),
                                        optimizer=artifacts.SGD())


def _train(arts, batches, state=None):
    state = state or CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(LR)
    losses = []
    for ids in batches:
        out = module(ids)
        losses.append(float(out[0] if isinstance(out, list) else out))
        opt.step()
        module.lazy_reset_grad()
    return losses, state, module


@pytest.fixture(scope="module", params=["q8", "q4"])
def trained(request, models):
    arts = _generate(models[request.param])
    batch = _ids(7, models["vocab"])
    losses, state, module = _train(arts, [batch] * STEPS)
    return {"kind": request.param, "arts": arts, "state": state, "module": module, "losses": losses, "batch": batch,
            "source": models[request.param], "vocab": models["vocab"]}


def test_lora_on_the_quantized_base_lowers_the_loss(trained):
    losses = trained["losses"]
    print("%s losses: %s" % (trained["kind"], " ".join("%.4f" % x for x in losses)))
    assert losses[-1] < losses[0] - 0.05, losses
    adapters = {n for a in trained["arts"].summary["lora"]["adapters"] for n in (a["lora_A"], a["lora_B"])}
    assert set(trained["arts"].summary["trainable"]) == adapters
    assert len(trained["arts"].summary["lora"]["adapters"]) == 8   # the 8 quantized layers
    assert all(a.get("quantized") for a in trained["arts"].summary["lora"]["adapters"])


def test_the_base_stays_quantized(trained):
    """The training model holds the file's int8 / packed 4-bit weights as they are (never a float copy)."""
    src = {t.name: t for t in onnx.load_from_string(trained["source"]).graph.initializer}
    train = {t.name: t for t in onnx.load_from_string(trained["arts"].training_model).graph.initializer}
    for a in trained["arts"].summary["lora"]["adapters"]:
        w = a["weight"]
        assert w in train and train[w].data_type in (TensorProto.INT8, TensorProto.UINT8)
        assert numpy_helper.to_array(train[w]).tobytes() == numpy_helper.to_array(src[w]).tobytes()
    assert not any(t.data_type == TensorProto.FLOAT and t.name.endswith("_merged") for t in train.values())


def _export(trained, merge):
    return trained["module"].export_model_for_inferencing(None, ["logits"], merge_adapters=merge)


def test_unmerged_export_runs_in_onnxruntime_with_pytrains_logits(trained):
    blob = _export(trained, False)
    feeds = {"input_ids": trained["batch"]}
    ours = InferenceSession(blob).run(None, feeds)[0]
    if trained["kind"] == "q8":   # onnxruntime's saturating u8s8 kernel aside (see the module's docstring)
        np.testing.assert_allclose(ours, ort_run(exact_integer_matmuls(onnx.load_from_string(blob)), feeds),
                                   rtol=1e-5, atol=1e-5)
        assert np.abs(ours - ort_run(blob, feeds)).max() < 0.02 * np.ptp(ours)
    else:
        np.testing.assert_allclose(ours, ort_run(blob, feeds), rtol=1e-5, atol=1e-5)
    base = InferenceSession(trained["source"]).run(None, feeds)[0]
    assert np.abs(ours - base).max() > 1e-2   # the adapters changed the logits


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.ptp(b))


def test_merged_exports_float_and_requantized(trained):
    feeds = {"input_ids": trained["batch"]}
    ours = InferenceSession(_export(trained, False)).run(None, feeds)[0]
    base = InferenceSession(trained["source"]).run(None, feeds)[0]
    merged = {m: _export(trained, m) for m in ("float", "requantize")}
    out = {m: ort_run(b, feeds) for m, b in merged.items()}
    for m, b in merged.items():
        np.testing.assert_allclose(InferenceSession(b).run(None, feeds)[0], out[m], rtol=1e-4,
                                   atol=0.02 * np.ptp(out[m]) if trained["kind"] == "q8" else 1e-5)
    d_float, d_requant = _distance(out["float"], ours), _distance(out["requantize"], out["float"])
    learned = _distance(ours, base)
    print("%s: float merge vs pytrain %.2g, requantized vs float merge %.2g, adapters' change %.2g"
          % (trained["kind"], d_float, d_requant, learned))
    if trained["kind"] == "q4":
        assert d_float < 1e-5     # no activation rounding in MatMulNBits: the float merge is the trained model
    else:
        assert d_float < 0.05     # the merged layers no longer round their activations
    assert d_requant < learned    # requantizing keeps most of what the adapters learned on these steps
    ops = _ops(merged["requantize"])
    assert ("com.microsoft", "MatMulNBits") in ops if trained["kind"] == "q4" else ("", "MatMulInteger") in ops


def test_gradient_is_the_float_models_through_the_dequantized_weights(trained):
    """Straight-through: the adapters' updates on the quantized base equal LoRA's on the float model holding the
    dequantized weights (pytrain's float LoRA equals peft's, tests/training/test_lora.py), up to what the
    activations' rounding moves in the forward pass (none for MatMulNBits, which does not round them)."""
    arts = trained["arts"]
    fresh = CheckpointState.load_checkpoint(arts.checkpoint)
    dequantized = Module(arts.training_model, fresh, arts.eval_model).export_model_for_inferencing(
        None, ["logits"], merge_adapters="float")
    assert not _ops(dequantized) & {("", "MatMulInteger"), ("com.microsoft", "MatMulNBits")}
    float_arts = _generate(dequantized)
    ours_table, theirs_table = arts.summary["lora"]["adapters"], float_arts.summary["lora"]["adapters"]
    assert len(ours_table) == len(theirs_table)
    theirs_state = CheckpointState.load_checkpoint(float_arts.checkpoint)
    for a, b in zip(ours_table, theirs_table):
        np.copyto(theirs_state.parameters[b["lora_A"]].data, fresh.parameters[a["lora_A"]].data)
    batches = [_ids(11, trained["vocab"]), _ids(12, trained["vocab"])]
    fresh_copy = {n: np.array(p.data) for n, p in fresh.parameters.items() if p.requires_grad}
    ours_losses, ours, _ = _train(arts, batches, fresh)
    theirs_losses, theirs, _ = _train(float_arts, batches, theirs_state)
    tol = 5e-2 if trained["kind"] == "q8" else 1e-4
    np.testing.assert_allclose(ours_losses, theirs_losses, rtol=tol)
    worst = 0.0
    for a, b in zip(ours_table, theirs_table):
        for which in ("lora_A", "lora_B"):
            x, y = ours.parameters[a[which]].data - fresh_copy[a[which]], theirs.parameters[b[which]].data - \
                fresh_copy[a[which]]   # the updates (lora_A's start is shared)
            worst = max(worst, float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-12)))
    print("%s: adapter updates differ from the float model's by %.2g of their size" % (trained["kind"], worst))
    assert worst <= tol


def test_memory_of_a_quantized_base(models):
    """Module.memory_estimate counts the base as the file holds it: int8 / 4-bit weights, never a float copy.
    Measured on the tiny GPT-2 at batch 1 (docs/quantized.md): parameters 201.6 KB float32, 93.7 KB q8 (its token
    table is int8 too), 121.7 KB q4 (token table and lm_head float)."""
    sizes = {}
    for kind in ("f32", "q8", "q4"):
        arts = _generate(models[kind])
        state = CheckpointState.load_checkpoint(arts.checkpoint)
        module = Module(arts.training_model, state, arts.eval_model)
        est = module.memory_estimate(_ids(0, models["vocab"])[:1], optimizer=Optimizer(arts.optimizer_model, module))
        sizes[kind] = est.parameters
    assert sizes["q8"] < 0.5 * sizes["f32"] and sizes["q4"] < 0.65 * sizes["f32"], sizes


def test_adapters_alone_and_default_targets(trained):
    from pytrain.engine.lora import default_targets, read_adapters, save_adapters

    got = read_adapters(save_adapters(trained["state"], format="onnx"))
    table = trained["arts"].summary["lora"]["adapters"]
    assert sorted(got) == sorted(n for a in table for n in (a["lora_A"], a["lora_B"]))
    assert all(".weight" not in n and "quantized" not in n and "_Q4" not in n for n in got)   # the layer's name
    for a in table:
        np.testing.assert_array_equal(got[a["lora_B"]], trained["state"].parameters[a["lora_B"]].data)
    # with no targets named, LoRA takes what peft takes on GPT-2 (c_attn), quantized
    chosen = default_targets(onnx.load_from_string(trained["source"]))
    assert len(chosen) == 2 and all(".attn.c_attn." in w for w in chosen), chosen


def fold_transposed_weights(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """MatMul(x, Transpose(W)) of an initializer W (pytrain.torch_export's Linear) as MatMul(x, W^T), the transposed
    initializer torch.onnx.export writes and onnxruntime's quantizers take."""
    inits = {t.name: t for t in model.graph.initializer}
    keep = []
    for n in model.graph.node:
        if n.op_type == "Transpose" and n.input[0] in inits:
            w = numpy_helper.to_array(inits[n.input[0]])
            model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.T), n.output[0]))
            continue
        keep.append(n)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model


@pytest.fixture(scope="module")
def bert(lm, tmp_path_factory):
    """A tiny BERT classifier (tests/helpers/tiny_lm.py), its Linear weights as transposed initializers, q8 and q4."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    from tiny_lm import tiny_bert_classifier

    model = fold_transposed_weights(onnx.load_from_string(tiny_bert_classifier(lm.vocab_size)))
    path = os.path.join(str(tmp_path_factory.mktemp("bert")), "model.onnx")
    onnx.save(model, path)
    quantize_dynamic(path, path + ".q8", weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True})
    q = MatMulNBitsQuantizer(onnx.load(path),
                             algo_config=DefaultWeightOnlyQuantConfig(block_size=16, is_symmetric=False))
    q.process()
    with open(path + ".q8", "rb") as f:
        q8 = f.read()
    ids = np.random.default_rng(3).integers(3, lm.vocab_size, (3, 16)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 12:] = 0
    return {"q8": q8, "q4": q.model.model.SerializeToString(), "feeds": {"input_ids": ids, "attention_mask": mask}}


def test_bert_quantized_inference_equals_onnxruntime(bert):
    assert ("", "MatMulInteger") in _ops(bert["q8"]) and ("com.microsoft", "MatMulNBits") in _ops(bert["q4"])
    feeds = bert["feeds"]
    np.testing.assert_allclose(InferenceSession(bert["q8"]).run(None, feeds)[0],
                               ort_run(exact_integer_matmuls(onnx.load_from_string(bert["q8"])), feeds),
                               rtol=1e-5, atol=1e-5)
    # asymmetric 4-bit blocks: packed uint8 zero points
    np.testing.assert_allclose(InferenceSession(bert["q4"]).run(None, feeds)[0], ort_run(bert["q4"], feeds),
                               rtol=1e-5, atol=1e-5)


def test_requantization_is_the_files_own_scheme(models):
    """pytrain's requantizer, given the float weights, writes the q8 file's own int8 weights and scales (the scheme
    "requantize" merges with), and the q4 file's 4-bit blocks up to rounding ties."""
    from pytrain.ops.quant.blocks import NBitsLayout, nbits_quantize
    from pytrain.engine.quant_merge import int8_quantize

    floats = {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(models["f32"]).graph.initializer}
    q8 = {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(models["q8"]).graph.initializer}
    layers = [n[:-len("_quantized")] for n in q8 if n.endswith("weight_quantized") and n[:-len("_quantized")] in floats]
    assert len(layers) == 10   # the 8 layers' matrices, the token and position tables
    for w in layers:
        want = q8[w + "_quantized"]
        symmetric = want.dtype == np.int8 and not q8[w + "_zero_point"].any()
        q, scale, zp = int8_quantize(floats[w], want.dtype, per_column=False, symmetric=symmetric)
        np.testing.assert_allclose(scale, q8[w + "_scale"], rtol=1e-6)
        assert np.mean(q == want) > 0.999 and zp == q8[w + "_zero_point"], w
    q4 = onnx.load_from_string(models["q4"])
    inits = {t.name: numpy_helper.to_array(t) for t in q4.graph.initializer}
    for n in (n for n in q4.graph.node if n.op_type == "MatMulNBits"):
        attrs = {a.name: a.i for a in n.attribute}
        w = floats[n.input[1][:-len("_Q4")]]
        B, s, _ = nbits_quantize(w.T, NBitsLayout(attrs["K"], attrs["N"], 4, attrs["block_size"]), symmetric=True)
        np.testing.assert_allclose(s.reshape(-1), inits[n.input[2]].reshape(-1), rtol=1e-6)
        assert np.mean(B == inits[n.input[1]]) > 0.99
