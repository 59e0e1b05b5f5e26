"""The Hub's quantized files as transformers.js downloads them (tests/fixtures/hub/*/onnx/model_quantized.onnx:
Optimum's export quantized q8 by ``quantize_dynamic``): pytrain's inference equals the exact oracle (onnxruntime
with each MatMulInteger as an int32 MatMul, docs/quantized.md), LoRA with the default targets on the quantized
base lowers the loss, and the export with the adapters as nodes runs in onnxruntime with pytrain's own outputs,
past and present kept."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from hub_fixtures import CAUSAL, CLASSIFIERS, hub  # noqa: E402
from quant_oracle import exact_integer_matmuls  # noqa: E402
from train_helpers import repeat_steps  # noqa: E402

from pytrain.generator import artifacts  # noqa: E402
from pytrain.device.api import CheckpointState, Module, Optimizer  # noqa: E402
from pytrain.engine.lora import LoRA, default_targets  # noqa: E402
from pytrain.proto import ModelProto  # noqa: E402
from pytrain.engine.runtime import InferenceSession  # noqa: E402
from pytrain.text import hub_inputs  # noqa: E402

FAMILIES = CAUSAL + CLASSIFIERS + ("vit",)


def _quantized(h) -> bytes:
    return (h.folder / "onnx" / "model_quantized.onnx").read_bytes()


def _inputs(h):
    """(the batch as the flows hold it, labels or None, feeds by name) for the oracle's batch."""
    plan = hub_inputs.plan_model(h.model, h.config, h.name)
    if h.name == "vit":
        x = np.random.RandomState(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
        return plan, x, np.asarray([0, 1], dtype=np.int64), {"pixel_values": x}
    ids = np.asarray(h.oracle["inputs"]["input_ids"], dtype=np.int64)
    mask = np.asarray(h.oracle["inputs"].get("attention_mask", np.ones_like(ids)), dtype=np.int64)
    labels = None if h.name in CAUSAL else np.asarray(h.oracle["labels"], dtype=np.int64)
    batch = ids if "attention_mask" not in h.oracle["inputs"] else np.stack([ids, mask], axis=1)
    return plan, batch, labels, plan.arrays(ids, mask)


def assert_same_up_to_activation_rounding(got, want):
    """Equal but for DynamicQuantizeLinear's rounding: an activation a float rounding apart from another runtime's
    can land on the neighbouring one of its 256 levels (one level moves the outputs by well under 2% of their
    range; docs/quantized.md), so a bound on the range, not 1e-5."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 0.02 * max(np.ptp(want), 1e-6) + 1e-5


def _oracle(blob: bytes, feeds, names):
    import onnxruntime

    sess = onnxruntime.InferenceSession(exact_integer_matmuls(onnx.load_from_string(blob)),
                                        providers=["CPUExecutionProvider"])
    return sess.run(names, feeds)


@pytest.mark.parametrize("name", FAMILIES)
def test_quantized_inference_equals_the_exact_oracle(name):
    h = hub(name)
    q8 = _quantized(h)
    _, _, _, feeds = _inputs(h)
    names = [o.name for o in onnx.load_from_string(q8).graph.output]
    with np.errstate(invalid="ignore"):
        got = InferenceSession(q8).run(names, feeds)
    for g, w in zip(got, _oracle(q8, feeds, names)):
        assert_same_up_to_activation_rounding(g, w)


@pytest.mark.parametrize("name", FAMILIES)
def test_lora_on_the_quantized_file_lowers_the_loss_and_exports_with_its_outputs(name):
    h = hub(name)
    q8 = _quantized(h)
    targets = default_targets(ModelProto.FromString(q8))
    assert targets, "no default LoRA target in %s's quantized file" % name
    loss = "CausalLMLoss" if name in CAUSAL else "CrossEntropyLoss"
    arts = artifacts.generate_artifacts(q8, loss=loss, optimizer=artifacts.AdamW(), lora=LoRA(4, 8, targets))
    assert arts.summary["trainable"] and all(".lora_" in n for n in arts.summary["trainable"])
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.02)
    plan, batch, labels, feeds = _inputs(h)
    step_feeds = plan.feeds(batch, labels)
    losses = repeat_steps(module, opt, step_feeds, 4)
    assert losses[-1] < losses[0], losses

    names = [o.name for o in onnx.load_from_string(q8).graph.output]
    exported = module.export_model_for_inferencing(None, names, merge_adapters=False)
    assert [o.name for o in onnx.load_from_string(exported).graph.output] == names
    with np.errstate(invalid="ignore"):
        ours = InferenceSession(exported).run(names, feeds)
        base = InferenceSession(q8).run(names[:1], feeds)[0]
    for g, w in zip(ours, _oracle(exported, feeds, names)):
        assert_same_up_to_activation_rounding(g, w)
    assert np.abs(ours[0] - base).max() > 1e-4   # the adapters moved the outputs


# ---- q4 with an int4 token table: MatMulNBitsQuantizer on MatMul and Gather --------------------------------
def _q4_with_int4_table(h) -> bytes:
    """The fixture's fp32 file quantized by onnxruntime's MatMulNBitsQuantizer on MatMul and Gather: MatMulNBits
    layers and a GatherBlockQuantized token table of int4 (TensorProto.INT4, two values a byte)."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.ERROR)
    config = DefaultWeightOnlyQuantConfig(block_size=16, is_symmetric=True, op_types_to_quantize=("MatMul", "Gather"),
                                          quant_axes=(("MatMul", 0), ("Gather", 1)))
    q = MatMulNBitsQuantizer(onnx.load_from_string(h.model), algo_config=config)
    q.process()
    return q.model.model.SerializeToString()


def _int4_initializers(blob: bytes):
    return {t.name: t.raw_data for t in onnx.load_from_string(blob).graph.initializer
            if t.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4)}


def test_q4_file_with_an_int4_token_table_runs_trains_and_writes_its_int4_back():
    import onnxruntime

    h = hub("llama")
    q4 = _q4_with_int4_table(h)
    table = _int4_initializers(q4)
    assert list(table) == ["model.embed_tokens.weight_Q4"]
    assert {n.op_type for n in onnx.load_from_string(q4).graph.node} >= {"GatherBlockQuantized", "MatMulNBits"}
    plan, batch, labels, feeds = _inputs(h)
    names = [o.name for o in onnx.load_from_string(q4).graph.output]
    want = onnxruntime.InferenceSession(q4, providers=["CPUExecutionProvider"]).run(names, feeds)
    got = InferenceSession(q4).run(names, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

    # full fine-tuning trains the float parameters (the norms); the quantizers' scales stay frozen
    full = artifacts.generate_artifacts(q4, loss="CausalLMLoss", optimizer=artifacts.SGD())
    assert full.summary["trainable"] and all("norm" in p for p in full.summary["trainable"])
    arts = artifacts.generate_artifacts(q4, loss="CausalLMLoss", optimizer=artifacts.AdamW(),
                                        lora=LoRA(4, 8, default_targets(ModelProto.FromString(q4))))
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.02)
    losses = repeat_steps(module, opt, plan.feeds(batch, labels), 3)
    assert losses[-1] < losses[0], losses
    exported = module.export_model_for_inferencing(None, names, merge_adapters=False)
    assert _int4_initializers(exported) == table   # the int4 table written back byte for byte
    ours = InferenceSession(exported).run(names[:1], feeds)[0]
    theirs = onnxruntime.InferenceSession(exported, providers=["CPUExecutionProvider"]).run(names[:1], feeds)[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert np.abs(ours - got[0]).max() > 1e-4   # the adapters moved the outputs
