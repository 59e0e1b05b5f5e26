"""Models as the Hugging Face Hub has them (tests/fixtures/hub: tiny GPT-2, Llama, Qwen2, Phi-3, Gemma, BERT,
DistilBERT and ViT exported by Optimum with the Hub's default task): fed as transformers feeds them
(:mod:`pytrain.text.hub_inputs`: positions from the mask, an empty past), pytrain's inference equals onnxruntime's,
3 SGD steps equal PyTorch's stored losses, and a ``text-generation-with-past`` model fine-tuned (LoRA or every
weight) exports with its ``past_key_values.*`` inputs and ``present.*`` outputs, from which onnxruntime's greedy loop
with the cache gives the tokens it gives without it and pytrain's own logits give."""
from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from train_helpers import repeat_steps  # noqa: E402
from hub_fixtures import CAUSAL, CLASSIFIERS, NO_PAST, greedy, hub, ort_session, specs  # noqa: E402

from pytrain.generator import artifacts  # noqa: E402
from pytrain.device.api import CheckpointState, Module, Optimizer  # noqa: E402
from pytrain.engine.lora import LoRA, default_targets  # noqa: E402
from pytrain.engine.runtime import InferenceSession  # noqa: E402
from pytrain.text import hub_inputs  # noqa: E402

TEXT_FAMILIES = CAUSAL + NO_PAST + CLASSIFIERS


def _plan(h):
    return hub_inputs.plan_model(h.model, h.config, h.name)   # the Python API's way


def _batch(h):
    """The oracle's batch as the text flows hold it: ids (N, L), or ids and mask (N, 2, L)."""
    ids = np.asarray(h.oracle["inputs"]["input_ids"], dtype=np.int64)
    mask = h.oracle["inputs"].get("attention_mask")
    return ids if mask is None else np.stack([ids, np.asarray(mask, dtype=np.int64)], axis=1)


@pytest.mark.parametrize("name", TEXT_FAMILIES + ("vit",))
def test_inference_equals_onnxruntime_with_the_inputs_transformers_feeds(name):
    h = hub(name)
    p = _plan(h)
    if name == "vit":
        rng = np.random.RandomState(0)
        feeds = {"pixel_values": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    else:
        ids = np.asarray(h.oracle["inputs"]["input_ids"], dtype=np.int64)
        mask = np.asarray(h.oracle["inputs"].get("attention_mask", np.ones_like(ids)), dtype=np.int64)
        if name in CAUSAL + NO_PAST:
            mask[1, :3] = 0   # left padding: positions restart after it
        feeds = p.arrays(ids, mask)
        assert set(feeds) == {n for n, _, _ in specs(h.model)}
    want = ort_session(h.model).run(None, feeds)
    with np.errstate(invalid="ignore"):   # a padded row's softmax over no key at all (both give its row alike)
        got = InferenceSession(h.model).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4)


def _sgd_module(h):
    loss = "CausalLMLoss" if h.oracle["family"] in CAUSAL else "CrossEntropyLoss"
    arts = artifacts.generate_artifacts(h.model, loss=loss, optimizer=artifacts.SGD())
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(h.oracle["sgd"]["lr"])
    return module, opt


@pytest.mark.parametrize("name", CAUSAL + ("phi3-no-past",) + CLASSIFIERS + ("vit",))
def test_three_sgd_steps_equal_pytorchs(name):
    h = hub(name)
    module, opt = _sgd_module(h)
    labels = None if h.oracle["family"] in CAUSAL else np.asarray(h.oracle["labels"], dtype=np.int64)
    x = np.random.RandomState(0).standard_normal((2, 3, 16, 16)) if name == "vit" else _batch(h)
    feeds = _plan(h).feeds(x, labels)
    ours = repeat_steps(module, opt, feeds, 3)
    np.testing.assert_allclose(ours, h.oracle["sgd"]["losses"], atol=1e-4)


@pytest.mark.parametrize("name", CAUSAL)
def test_the_files_greedy_tokens_with_the_cache_are_transformers(name):
    h = hub(name)
    p = _plan(h)
    g = h.oracle["greedy"]
    sess = ort_session(h.model)
    assert greedy(sess, p, g["prompt"], len(g["tokens"]), cached=True) == g["tokens"]
    assert greedy(InferenceSession(h.model), p, g["prompt"], len(g["tokens"]), cached=True) == g["tokens"]


def _fine_tuned(h, lora):
    arts = artifacts.generate_artifacts(h.model, loss="CausalLMLoss", optimizer=artifacts.AdamW(), lora=lora)
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.02)
    feeds = _plan(h).feeds(_batch(h))
    return module, repeat_steps(module, opt, feeds, 4)


@pytest.mark.parametrize("name,lora", [("gpt2", True), ("llama", True), ("phi3", False), ("gemma", True)])
def test_a_with_past_model_trains_and_exports_with_past(name, lora, tmp_path):
    h = hub(name)
    from pytrain.proto import ModelProto

    targets = default_targets(ModelProto.FromString(h.model)) if lora else ()
    module, losses = _fine_tuned(h, LoRA(4, 8, targets) if lora else None)
    assert losses[-1] < losses[0]
    out = tmp_path / "model.onnx"
    import onnx

    names = [o.name for o in onnx.load_from_string(h.model).graph.output]
    module.export_model_for_inferencing(str(out), names)
    exported = out.read_bytes()
    assert specs(exported) == specs(h.model)   # past_key_values.* in, and present.* out
    assert [o.name for o in onnx.load_from_string(exported).graph.output] == names
    p = _plan(h)
    prompt, n = h.oracle["greedy"]["prompt"], 8
    sess = ort_session(exported)
    cached = greedy(sess, p, prompt, n, cached=True)
    assert cached == greedy(sess, p, prompt, n, cached=False)
    assert cached == greedy(InferenceSession(exported), p, prompt, n, cached=False)
    feeds = p.arrays(np.asarray([prompt + cached], dtype=np.int64))
    np.testing.assert_allclose(InferenceSession(exported).run(["logits"], feeds)[0],
                               sess.run(["logits"], feeds)[0], atol=2e-5, rtol=1e-4)
