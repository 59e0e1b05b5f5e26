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
