"""Issue 21, item 1: current Hugging Face families from tiny configs (1 layer, hidden 32, sequence 8,
vocabulary 64) with their default attention ("sdpa"), through both of torch's exporters: Llama, Qwen2,
Phi-3, Gemma, Mistral-style grouped-query attention, BERT, RoBERTa, CLIP (text and vision towers, its
contrastive logits), Whisper's encoder (``WhisperForAudioClassification``), T5, GPT-2, DistilBERT, ViT.

Each export is a plain ``torch.onnx.export(model, args, "m.onnx")`` with the exporter's defaults, or
``pytrain.torch_export`` where the plain export cannot train as PyTorch does (ROUTE says which and
why). From identical weights, 10 steps of SGD and of AdamW give PyTorch's losses (within 1e-3), and
onnxruntime runs the exported inference model with PyTorch's output after the steps. What a plain
export folded into constants does not train (docs/models.md, "What trains by default"): NOT_TRAINED lists it,
and PyTorch trains the rest for the comparison.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch, onnx, ort, _, _ = (pytest.importorskip(m) for m in ("torch", "onnx", "onnxruntime", "transformers",
                                                          "onnxscript"))

from hf_families import FAMILIES, batches, build, export, quiet  # noqa: E402
from pytrain.generator import artifacts  # noqa: E402
from pytrain.device.api import Module  # noqa: E402
from test_architectures import match  # noqa: E402
from torch_models import torch_steps  # noqa: E402
from train_helpers import train_steps  # noqa: E402

STEPS = 10
#: optimizer -> (torch's, pytrain's, learning rate)
OPTIMS = {"sgd": (torch.optim.SGD, artifacts.SGD, 0.05), "adamw": (torch.optim.AdamW, artifacts.AdamW, 1e-3)}

#: where a plain export cannot train as PyTorch does, the route that does (measured with torch 2.13,
#: transformers 5.24): Gemma's RMSNorm multiplies by ``1 + weight``, which TorchScript's constant folding
#: turns into one constant; Whisper's encoder freezes its position table (requires_grad=False), which a
#: TorchScript file cannot say; Mistral's grouped-query sdpa call (enable_gqa) has no TorchScript
#: conversion, so torch_export falls back to the dynamo exporter
ROUTE = {("gemma", "torchscript"): "torch_export", ("whisper_encoder", "torchscript"): "torch_export",
         ("mistral_gqa", "torchscript"): "torch_export"}
#: PyTorch parameters a plain dynamo export folds into constants by arithmetic (not trained by pytrain): Gemma's
#: RMSNorm ``1 + weight``, CLIP's ``logit_scale.exp()``. A selection of a parameter the exporter folded (GPT-2's
#: and DistilBERT's rows of their position tables, ViT's expanded class token, Swin's gathered bias table)
#: trains as that parameter (FOLDED)
NOT_TRAINED = {
    ("gemma", "dynamo"): {"hf.model.layers.0.input_layernorm.weight",
                          "hf.model.layers.0.post_attention_layernorm.weight", "hf.model.norm.weight"},
    ("clip", "dynamo"): {"hf.logit_scale"},
}
#: (family, exporter) -> {parameter: (how the exporter folded it, the shape that trains)}
#: (pytrain.generator.trainable.refold_parameter_copies): "selection" trains the entries the model reads (the position
#: rows of its sequence length, SEQ = 8), "expand" and "gather" the parameter's distinct entries, each read by
#: every use, as in PyTorch (ViT's class token whole; Swin's 9 x 2 table as its 18 entries; BERT's row 0 of
#: its token types, the only one a model without token_type_ids reads)
_SWIN_TABLE = "hf.swin.encoder.layers.0.blocks.0.attention.relative_position_bias.relative_position_bias_table"
FOLDED = {
    ("gpt2", "dynamo"): {"hf.transformer.wpe.weight": ("selection", [1, 8, 32])},
    ("distilbert", "dynamo"): {"hf.distilbert.embeddings.position_embeddings.weight": ("selection", [1, 8, 32])},
    ("vit", "dynamo"): {"hf.vit.embeddings.cls_token": ("expand", [1, 1, 32])},
    ("swin", "dynamo"): {_SWIN_TABLE: ("gather", [18])},
    ("whisper_encoder", "dynamo"): {"hf.encoder.embed_positions.weight": ("selection", [8, 32])},
    ("swin", "torchscript"): {_SWIN_TABLE: ("gather", [18])},
    ("clip", "dynamo"): {"hf.vision_model.embeddings.class_embedding": ("expand", [1, 1, 32]),
                         "hf.vision_model.embeddings.position_embedding.weight": ("selection", [1, 17, 32]),
                         "hf.text_model.embeddings.position_embedding.weight": ("selection", [1, 8, 32])},
    ("bert", "dynamo"): {"hf.bert.embeddings.position_embeddings.weight": ("selection", [1, 8, 32]),
                         "hf.bert.embeddings.token_type_embeddings.weight": ("expand", [1, 1, 32])},
}
#: models whose default attention one exporter cannot export: built with eager attention
EAGER = {"swin"}
#: a TorchScript file cannot tell CLIP's rank-0 logit_scale from a constant, and no plain export records that
#: Whisper freezes its position table (requires_grad=False; the dynamo file holds the rows it reads, folded,
#: which train by default as any parameter's): requires_grad names what trains
NAME_PARAMETERS = {("clip", "torchscript"), ("whisper_encoder", "dynamo")}
#: T5's lm_head is its shared embedding: TorchScript writes the lm_head's transposed use as a second
#: initializer, which generate_artifacts ties to the embedding again (test_tied_lm_head_trains_tied)
TIED = {("t5", "torchscript"): "hf.shared.weight"}
CASES = [(f, e) for f in FAMILIES for e in ("dynamo", "torchscript") if (f, e) != ("t5", "dynamo")]

_EXPORTS: dict = {}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One export per (family, exporter), shared by the optimizers' tests."""
    def get(family: str, exporter: str) -> str:
        if (family, exporter) not in _EXPORTS:
            model, names = build(family, exporter)
            folder = str(tmp_path_factory.mktemp("%s_%s" % (family, exporter)))
            _EXPORTS[(family, exporter)] = export(model, family, names, ROUTE.get((family, exporter), exporter),
                                                  folder)
        return _EXPORTS[(family, exporter)]
    return get


def _route(path: str) -> str:
    return {p.key: p.value for p in onnx.load(path).metadata_props}.get("pytrain.export_route", "")


def trains_like_torch(model, names, family: str, path: str, optim: str, requires_grad=None,
                      not_trained=frozenset(), tied_to=None, steps: int = STEPS, folded=None) -> float:
    """``steps`` steps in pytrain and PyTorch from the same weights; the largest loss difference. PyTorch trains
    its trainable parameters but ``not_trained``; ``tied_to``: the parameter an exporter's copy is tied
    to again (None: no copy); ``folded``: {parameter: (how, shape)} the exporter folded into a copy that trains as
    it; onnxruntime then runs the exported model with PyTorch's output."""
    torch_opt, ours, lr = OPTIMS[optim]
    mapping, lost = match(model, path)
    if requires_grad == "all":
        requires_grad = [mapping[n][0] for n, p in model.named_parameters() if p.requires_grad]
    arts = artifacts.generate_artifacts(path, requires_grad=requires_grad, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=ours(), additional_output_names=["output"])
    copies = arts.summary["tied"]
    assert [t["parameter"] for t in copies if t["how"] == "transpose"] == ([tied_to] if tied_to else [])
    refolded = {t["parameter"]: t for t in copies if t["how"] != "transpose"}
    unnamed = [p for p in refolded if p not in dict(model.named_parameters())]
    if unnamed:  # TorchScript names a folded copy after its op: it stands for the one parameter not found by value
        assert len(unnamed) == 1 and len(lost) == 1, (unnamed, lost)
        refolded[lost[0]] = refolded.pop(unnamed[0])
    assert {p: (t["how"], t["shape"]) for p, t in refolded.items()} == (folded or {})
    trained = set(arts.summary["trainable"])
    held = {n: refolded[n]["trains_as"] if n in refolded else mapping.get(n, ("",))[0]
            for n, p in model.named_parameters() if p.requires_grad}
    skipped = {n for n, i in held.items() if i not in trained}
    assert skipped == set(not_trained)
    params = [p for n, p in model.named_parameters() if p.requires_grad and n not in skipped]
    # the default set is PyTorch's tensor for tensor: each parameter under its shape (or the layout the
    # exporter stores it in), a folded copy as FOLDED says
    shapes = {r["name"]: r["shape"] for r in arts.summary["initializers"]}
    assert len(trained) == len(params)
    assert all(int(np.prod(shapes[held[n]])) == p.numel()
               for n, p in model.named_parameters() if n not in refolded and n not in skipped and p.requires_grad)
    assert arts.summary["trainable_count"] == sum(
        int(np.prod(refolded[n]["shape"])) if n in refolded else p.numel()
        for n, p in model.named_parameters() if p.requires_grad and n not in skipped)

    data = batches(family, names, steps)
    losses, state = train_steps(arts, data, lr)
    for n, p in model.named_parameters():
        p.requires_grad_(p.requires_grad and n not in skipped)
    want = torch_steps(model, torch_opt(params, lr=lr), data)
    diff = float(np.max(np.abs(np.array(losses) - np.array(want))))
    assert diff <= 1e-3, (losses, want)

    module = Module(arts.training_model, state, arts.eval_model)
    sess = ort.InferenceSession(module.export_model_for_inferencing(None, ["output"]),
                                providers=["CPUExecutionProvider"])
    inputs = data[0][0]
    model.eval()
    with torch.no_grad():
        ref = model(*(torch.from_numpy(a) for a in inputs)).numpy()
    np.testing.assert_allclose(sess.run(None, dict(zip(names, inputs)))[0], ref, rtol=1e-3, atol=1e-4)
    return diff


@pytest.mark.parametrize("optim", sorted(OPTIMS))
@pytest.mark.parametrize("family,exporter", CASES)
def test_trains_like_torch(family, exporter, optim, exported):
    path = exported(family, exporter)
    model, names = build(family, exporter)
    assert model.hf.config._attn_implementation == ("eager" if family in EAGER else "sdpa")  # Hugging Face's default
    if ROUTE.get((family, exporter)) == "torch_export":
        fallback = family == "mistral_gqa"
        assert _route(path).startswith("dynamo") == fallback
    diff = trains_like_torch(model, names, family, path, optim,
                             requires_grad="all" if (family, exporter) in NAME_PARAMETERS else None,
                             not_trained=NOT_TRAINED.get((family, exporter), set()),
                             tied_to=TIED.get((family, exporter)), folded=FOLDED.get((family, exporter)))
    print("\nmax loss diff %s %s %s: %.2e" % (family, exporter, optim, diff))


#: eager attention (``attn_implementation="eager"``): each family once, through TorchScript (the cheaper export;
#: the routes and the parameters to name as above), SGD, 3 steps
EAGER_STEPS = 3


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in EAGER])
def test_eager_attention_trains_like_torch(family, tmp_path):
    model, names = build(family, "torchscript")
    model.hf.set_attn_implementation("eager")
    assert model.hf.config._attn_implementation == "eager"
    path = export(model, family, names, ROUTE.get((family, "torchscript"), "torchscript"), str(tmp_path))
    diff = trains_like_torch(model, names, family, path, "sgd",
                             requires_grad="all" if (family, "torchscript") in NAME_PARAMETERS else None,
                             tied_to=TIED.get((family, "torchscript")), steps=EAGER_STEPS)
    print("\nmax loss diff %s torchscript eager sgd: %.2e" % (family, diff))


def test_whisper_frozen_position_table_stays_frozen(exported):
    """torch_export records Whisper's frozen position table; generate_artifacts keeps it frozen."""
    path = exported("whisper_encoder", "torchscript")
    meta = {p.key: p.value for p in onnx.load(path).metadata_props}
    assert json.loads(meta["pytrain.frozen_params"]) == ["hf.encoder.embed_positions.weight"]


def test_torch_export_refuses_clip_naming_its_rank0_logit_scale(tmp_path):
    """pytrain's default rule does not train a rank-0 tensor: torch_export says so by name rather than
    write a file that trains less than PyTorch (the plain TorchScript export trains with requires_grad)."""
    import pytrain

    model, names = build("clip", "torchscript")
    with quiet(), pytest.raises(pytrain.errors.ExportError, match=r"hf\.logit_scale \(a scalar constant \(rank 0\)\)"):
        export(model, "clip", names, "torch_export", str(tmp_path))


def test_t5_dynamo_export_fails_in_torch_with_sdpa_and_trains_with_eager(tmp_path):
    """torch's dynamo exporter cannot export T5 with its default attention (the decomposition views sdpa's
    transposed output, which is not contiguous, torch 2.13): recorded here so that a torch which can shows
    up. T5 trains through TorchScript (plain or torch_export, which takes TorchScript first), and through
    dynamo with eager attention, which folds the relative-position biases into constants gathered from the
    tables: they train as the tables' entries the sequence length reads (7 of 8 buckets in the encoder, 6 in
    the causal decoder, x 4 heads)."""
    model, names = build("t5")
    with quiet(), pytest.raises(Exception, match="Cannot view a tensor"):
        export(model, "t5", names, "dynamo", str(tmp_path))
    model.hf.set_attn_implementation("eager")
    path = export(model, "t5", names, "dynamo", str(tmp_path))
    table = "hf.%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    folded = {table % "encoder": ("gather", [28]), table % "decoder": ("gather", [24])}
    diff = trains_like_torch(model, names, "t5", path, "adamw", tied_to="hf.lm_head.weight", folded=folded)
    print("\nmax loss diff t5 dynamo (eager attention) adamw: %.2e" % diff)


# ---- tied weights ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_tied_lm_head_trains_tied(exporter, tmp_path):
    """GPT-2 with its lm_head tied to the token embedding: both exporters write the lm_head's transposed
    use as a second initializer (dynamo ``val_<n>``, TorchScript ``onnx::MatMul_<n>``); generate_artifacts
    reads it from the embedding again, so one tensor trains, as in PyTorch, with PyTorch's losses."""
    model, names = build("gpt2", exporter, tied=True)
    assert model.hf.lm_head.weight is model.hf.transformer.wte.weight
    path = export(model, "gpt2", names, exporter, str(tmp_path))
    inits = {t.name: t for t in onnx.load(path).graph.initializer}
    copies = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss).summary["tied"]
    tied = [t for t in copies if t["how"] == "transpose"]
    assert len(tied) == 1 and tied[0]["copy"] in inits and tied[0]["copy"] not in dict(model.named_parameters())
    # the name each exporter gives the one tensor
    tied_to = {"dynamo": "hf.lm_head.weight", "torchscript": "hf.transformer.wte.weight"}[exporter]
    diff = trains_like_torch(model, names, "gpt2", path, "adamw", not_trained=NOT_TRAINED.get(("gpt2", exporter), ()),
                             tied_to=tied_to, folded=FOLDED.get(("gpt2", exporter)))
    print("\nmax loss diff gpt2 tied %s adamw: %.2e" % (exporter, diff))


def test_torch_export_keeps_a_tied_lm_head_as_one_tensor(tmp_path):
    """Through torch_export's dynamo fallback (GPT-2 called with input_ids alone) the tied tensor is one
    initializer under one of its two names (``hf.lm_head.weight``) read through a Transpose node: torch_export
    accepts either name, and it trains as one tensor with PyTorch's losses."""
    model, names = build("gpt2", "dynamo", tied=True)
    model.hf.config.use_cache = False
    path = export(model, "gpt2", names, "torch_export", str(tmp_path))
    assert _route(path).startswith("dynamo")
    inits = {t.name for t in onnx.load(path).graph.initializer}
    assert "hf.lm_head.weight" in inits and "hf.transformer.wte.weight" not in inits
    diff = trains_like_torch(model, names, "gpt2", path, "adamw")
    print("\nmax loss diff gpt2 tied torch_export adamw: %.2e" % diff)
