"""Hugging Face transformers as people export them: GPT-2, DistilBERT and ViT from tiny configs with
their default attention ("sdpa", whose lowering emits IsNaN), exported with torch's default (dynamo)
exporter and with the TorchScript one (``dynamo=False``; GPT-2 with an attention mask there, the call
that emits IsNaN), each as ``torch.onnx.export(model, args, "m.onnx")`` with the exporter's defaults.

From identical weights, 5 SGD steps in pytrain and in PyTorch give the same losses (rel 1e-3), and the
exported inference model in onnxruntime gives PyTorch's output after them. The parameters an exporter
folded into constants (the position table slice the example used, ViT's cls token expanded to the
batch) are gone from the file: pytrain does not train what the exporter computed (README, "What trains
by default"), so the trainable element count equals that of the parameters the file kept, and PyTorch
trains those only (the lost ones frozen) for the comparison.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
from torch_zoo import stub_torchvision_ops  # noqa: E402  (transformers imports torchvision)

from pytrain import artifacts  # noqa: E402
from pytrain.api import Module  # noqa: E402
from test_architectures import match  # noqa: E402
from torch_models import torch_steps  # noqa: E402
from train_helpers import train_steps  # noqa: E402

stub_torchvision_ops()
nn = torch.nn

STEPS, LR, BATCH, SEQ, VOCAB, HIDDEN, LAYERS = 5, 0.05, 4, 8, 40, 32, 2


class Logits(nn.Module):
    """A Hugging Face model called with its inputs by name, returning the logits; an LM's as
    (N, vocab, T), the layout torch's and ONNX's cross entropy take."""

    def __init__(self, hf: nn.Module, names, transpose: bool = False) -> None:
        super().__init__()
        self.hf, self.names, self.transpose = hf, tuple(names), transpose

    def forward(self, *args):
        logits = self.hf(**dict(zip(self.names, args))).logits
        return logits.transpose(1, 2) if self.transpose else logits


def _gpt2(names):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=2, n_positions=2 * SEQ,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False)
    return Logits(GPT2LMHeadModel(cfg), names, transpose=True)


def _distilbert(names):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=2, hidden_dim=2 * HIDDEN,
                           max_position_embeddings=2 * SEQ, dropout=0.0, attention_dropout=0.0,
                           seq_classif_dropout=0.0, num_labels=3)
    return Logits(DistilBertForSequenceClassification(cfg), names)


def _vit(names):
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                    num_attention_heads=2, intermediate_size=2 * HIDDEN, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, num_labels=3)
    return Logits(ViTForImageClassification(cfg), names)


def _mask(n: int) -> np.ndarray:
    mask = np.ones((n, SEQ), np.int64)
    for i in range(n):
        mask[i, SEQ - i % 3:] = 0  # right padding of 0, 2 or 1 tokens
    return mask


def _batches(family: str, names, steps: int):
    rng = np.random.default_rng(1)
    out = []
    for _ in range(steps):
        if family == "vit":
            x = rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32)
            out.append(((x,), (x[:, 0].mean((1, 2)) > 0).astype(np.int64) + (x[:, 1].mean((1, 2)) > 0)))
            continue
        ids = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": _mask(BATCH)}
        y = (ids * 7 + 3) % VOCAB if family == "gpt2" else (ids[:, 0] % 3).astype(np.int64)
        out.append((tuple(feeds[n] for n in names), y.astype(np.int64)))
    return out


#: family -> (builder, input names per exporter); TorchScript's GPT-2 gets a mask (the call emitting IsNaN)
FAMILIES = {
    "gpt2": (_gpt2, {"dynamo": ("input_ids",), "torchscript": ("input_ids", "attention_mask")}),
    "distilbert": (_distilbert, {"dynamo": ("input_ids", "attention_mask"),
                                 "torchscript": ("input_ids", "attention_mask")}),
    "vit": (_vit, {"dynamo": ("pixel_values",), "torchscript": ("pixel_values",)}),
}
#: what each export folds into constants (measured with torch 2.13, transformers 5.24)
FOLDED = {
    ("gpt2", "dynamo"): {"hf.transformer.wpe.weight"},
    ("distilbert", "dynamo"): {"hf.distilbert.embeddings.position_embeddings.weight"},
    ("vit", "dynamo"): {"hf.vit.embeddings.cls_token"},
}


def build(family: str, exporter: str):
    """The seeded model, its parameters nudged apart (the exporters merge equal tensors: zero biases,
    LayerNorms' ones), and its input names."""
    make, names = FAMILIES[family]
    torch.manual_seed(0)
    model = make(names[exporter])
    assert model.hf.config._attn_implementation == "sdpa"  # Hugging Face's default
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model, names[exporter]


def export(model, names, exporter: str, folder: str) -> str:
    (args, _), = _batches(model.hf.config.model_type, names, 1)
    path = os.path.join(folder, "m.onnx")
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(model, tuple(torch.from_numpy(a) for a in args), path, dynamo=exporter == "dynamo",
                              input_names=list(names), output_names=["output"])
    finally:
        logging.disable(logging.NOTSET)
    return path


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_trains_like_torch(family, exporter, tmp_path):
    model, names = build(family, exporter)
    path = export(model, names, exporter, str(tmp_path))
    # sdpa's lowering emits IsNaN: through dynamo always, through TorchScript when a mask is passed
    emits = exporter == "dynamo" or "attention_mask" in names
    assert any(n.op_type == "IsNaN" for n in onnx.load(path).graph.node) == emits
    mapping, lost = match(model, path)
    assert set(lost) == FOLDED.get((family, exporter), set())
    kept = [p for n, p in model.named_parameters() if n not in lost]
    arts = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.SGD, additional_output_names=["output"])
    # only parameters train by default: what the exporter computed from them does not
    assert arts.summary["trainable_count"] == sum(p.numel() for p in kept)
    assert sorted(arts.summary["trainable"]) == sorted(mapping[n][0] for n, _ in model.named_parameters()
                                                       if n not in lost)

    batches = _batches(family, names, STEPS)
    losses, state = train_steps(arts, batches, LR)
    for n, p in model.named_parameters():
        p.requires_grad_(n not in lost)  # PyTorch trains what the file kept
    want = torch_steps(model, torch.optim.SGD(kept, lr=LR), batches)
    np.testing.assert_allclose(losses, want, rtol=1e-3, atol=1e-6)

    # the exported inference model in onnxruntime gives PyTorch's output after the steps
    module = Module(arts.training_model, state, arts.eval_model)
    exported = module.export_model_for_inferencing(None, ["output"])
    inputs = batches[0][0]
    sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip(names, inputs)))[0]
    model.eval()
    with torch.no_grad():
        ref = model(*(torch.from_numpy(a) for a in inputs)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_vit_eager_folded_mask_does_not_train(tmp_path):
    """Issue 21, item 3: ViT with eager attention through the default exporter carries an all-zero
    initializer ``where`` (the attention mask the exporter computed) added to the scores; the graph
    signature does not list it, so it does not train, and what trains is the parameters the file kept."""
    model, names = build("vit", "dynamo")
    model.hf.config._attn_implementation = "eager"
    path = export(model, names, "dynamo", str(tmp_path))
    _, lost = match(model, path)
    assert lost == ["hf.vit.embeddings.cls_token"]
    summary = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss).summary
    report = {r["name"]: r for r in summary["initializers"]}
    assert not report["where"]["trains"] and "not in its graph signature" in report["where"]["why"]
    assert summary["trainable_count"] == sum(p.numel() for n, p in model.named_parameters() if n not in lost)


# ---- pytrain.torch_export when TorchScript cannot export (issue 21, item 2) ---------------------------

def _export_route(path: str) -> str:
    return {p.key: p.value for p in onnx.load(path).metadata_props}["pytrain.export_route"]


def _trains_every_parameter_like_torch(model, path: str, batches):
    """Every parameter trains by default, and 5 SGD steps give PyTorch's losses; returns pytrain's state."""
    arts = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.SGD)
    assert arts.summary["trainable_count"] == sum(p.numel() for p in model.parameters())
    losses, state = train_steps(arts, batches, LR)
    want = torch_steps(model, torch.optim.SGD(model.parameters(), lr=LR), batches)
    np.testing.assert_allclose(losses, want, rtol=1e-3, atol=1e-6)
    return state


def test_torch_export_falls_back_to_dynamo_for_gpt2_called_with_input_ids(tmp_path):
    """GPT-2 called as in training (no cache) with input_ids alone: transformers' packed-sequence check
    uses aten::diff, which TorchScript lacks; torch_export says so and takes the dynamo exporter, with
    every parameter separate under its state_dict name, a symbolic batch, and PyTorch's training."""
    import pytrain

    model, names = build("gpt2", "dynamo")
    model.hf.config.use_cache = False
    batches = _batches("gpt2", names, STEPS)
    path = os.path.join(str(tmp_path), "m.onnx")
    example = tuple(torch.from_numpy(a[:2]) for a in batches[0][0])  # another batch size than training's
    with pytest.warns(UserWarning, match="aten::diff.*dynamo exporter"):
        pytrain.torch_export(model, example, path, input_names=list(names))
    assert _export_route(path).startswith("dynamo: the TorchScript exporter failed")
    proto = onnx.load(path)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    inits = {t.name for t in proto.graph.initializer}
    assert {n for n, _ in model.named_parameters()} <= inits
    _trains_every_parameter_like_torch(model, path, batches)


class DiffConvBN(nn.Module):
    """A conv net with BatchNorm whose forward uses torch.diff (no TorchScript symbolic)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(4, 3)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(torch.diff(x, dim=-1))))
        return self.fc(h.mean((2, 3)))


def test_torch_export_fallback_keeps_batchnorm_and_equal_parameters(tmp_path):
    """Through the fallback, BatchNorm stays a node with its own scale, bias and running statistics
    (the dynamo exporter's optimizer would fold it into the convolution) and equal tensors stay apart
    (BatchNorm's bias and the zeroed fc bias are not merged); training is PyTorch's."""
    import pytrain

    torch.manual_seed(0)
    model = DiffConvBN()
    with torch.no_grad():
        model.fc.bias.zero_()
        model.bn.bias.zero_()
    path = os.path.join(str(tmp_path), "m.onnx")
    rng = np.random.default_rng(0)
    batches = [((rng.standard_normal((4, 2, 6, 7)).astype(np.float32),), rng.integers(0, 3, 4).astype(np.int64))
               for _ in range(3)]
    with pytest.warns(UserWarning, match="dynamo exporter"):
        pytrain.torch_export(model, torch.from_numpy(batches[0][0][0]), path)
    assert _export_route(path).startswith("dynamo")
    proto = onnx.load(path)
    assert [n.op_type for n in proto.graph.node].count("BatchNormalization") == 1
    assert {n for n in model.state_dict() if "num_batches" not in n} <= {t.name for t in proto.graph.initializer}
    state = _trains_every_parameter_like_torch(model, path, batches)
    np.testing.assert_allclose(state.parameters["bn.running_mean"].data, model.bn.running_mean.numpy(),
                               rtol=1e-4, atol=1e-6)
