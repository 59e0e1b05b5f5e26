"""Hugging Face model families from tiny configs (random init, nothing from a hub), each wrapped to
take its inputs positionally and return the logits, with data whose labels are a fixed function of
the inputs, and torch's two exporters called as people call them (``torch.onnx.export(model, args,
path)`` with the exporter's defaults) or through ``pytrain.torch_export``."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from typing import Callable, Dict, NamedTuple, Tuple

import numpy as np
import torch
from torch import nn

from torch_zoo import stub_torchvision_ops

stub_torchvision_ops()

BATCH, SEQ, VOCAB, HIDDEN, LAYERS, IMAGE = 4, 8, 64, 32, 1, 16
#: token ids the configs reserve (pad, bos, eos): the data draws from the others
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


class Logits(nn.Module):
    """A Hugging Face model called with its inputs by name, returning ``output`` (default the logits);
    an LM's as (N, vocab, T), the layout torch's and ONNX's cross entropy take."""

    def __init__(self, hf: nn.Module, names, transpose: bool = False, output: str = "logits") -> None:
        super().__init__()
        self.hf, self.names, self.transpose, self.output = hf, tuple(names), transpose, output

    def forward(self, *args):
        out = getattr(self.hf(**dict(zip(self.names, args))), self.output)
        return out.transpose(1, 2) if self.transpose else out


def _decoder(config: str, model: str, **kw) -> nn.Module:
    import transformers

    cfg = getattr(transformers, config)(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                                        num_hidden_layers=LAYERS, num_attention_heads=4,
                                        max_position_embeddings=2 * SEQ, tie_word_embeddings=False,
                                        **dict(SPECIAL, **kw))
    return getattr(transformers, model)(cfg)


def _encoder(config: str, model: str, **kw) -> nn.Module:
    import transformers

    cfg = getattr(transformers, config)(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                                        num_hidden_layers=LAYERS, num_attention_heads=4,
                                        max_position_embeddings=2 * SEQ + 2, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0, num_labels=3, **kw)
    return getattr(transformers, model)(cfg)


def gpt2(tied: bool = False) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=2, n_positions=2 * SEQ,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=tied,
                     bos_token_id=SPECIAL["bos_token_id"], eos_token_id=SPECIAL["eos_token_id"])
    return GPT2LMHeadModel(cfg)


def distilbert() -> nn.Module:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=2, hidden_dim=2 * HIDDEN,
                           max_position_embeddings=2 * SEQ, dropout=0.0, attention_dropout=0.0,
                           seq_classif_dropout=0.0, num_labels=3)
    return DistilBertForSequenceClassification(cfg)


def vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=IMAGE, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                    num_attention_heads=2, intermediate_size=2 * HIDDEN, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, num_labels=3)
    return ViTForImageClassification(cfg)


def swin() -> nn.Module:
    """Swin with eager attention: the dynamo exporter cannot export its sdpa call (torch 2.13 views sdpa's
    transposed output, as for T5)."""
    from transformers import SwinConfig, SwinForImageClassification

    cfg = SwinConfig(image_size=IMAGE, patch_size=4, num_channels=3, embed_dim=16, depths=[1], num_heads=[2],
                     window_size=2, mlp_ratio=2.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     drop_path_rate=0.0, num_labels=3)
    model = SwinForImageClassification(cfg)
    model.set_attn_implementation("eager")
    return model


def clip() -> nn.Module:
    from transformers import CLIPConfig, CLIPModel

    cfg = CLIPConfig(text_config=dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                                      num_hidden_layers=LAYERS, num_attention_heads=4, max_position_embeddings=SEQ,
                                      **SPECIAL),
                     vision_config=dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                                        num_attention_heads=4, image_size=IMAGE, patch_size=4), projection_dim=16)
    return CLIPModel(cfg)


def whisper() -> nn.Module:
    from transformers import WhisperConfig, WhisperForAudioClassification

    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, encoder_layers=LAYERS, encoder_attention_heads=4,
                        decoder_layers=LAYERS, decoder_attention_heads=4, d_model=HIDDEN, encoder_ffn_dim=2 * HIDDEN,
                        decoder_ffn_dim=2 * HIDDEN, max_source_positions=SEQ, max_target_positions=SEQ, num_labels=3,
                        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, classifier_proj_size=16,
                        decoder_start_token_id=1, **SPECIAL)
    return WhisperForAudioClassification(cfg)


def t5() -> nn.Module:
    """T5 ties lm_head to the shared embedding whatever the config says (transformers 5)."""
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=2 * HIDDEN, num_layers=LAYERS,
                   num_decoder_layers=LAYERS, num_heads=4, relative_attention_num_buckets=8,
                   relative_attention_max_distance=16, dropout_rate=0.0, decoder_start_token_id=0)
    return T5ForConditionalGeneration(cfg)


class Family(NamedTuple):
    """``make()`` the Hugging Face model; ``names`` its inputs per exporter; ``kind`` the data
    ("lm": next-token-like labels over (N, vocab, T), "cls": 3 classes, "image", "audio", "clip":
    image i matches text i, "seq2seq")."""
    make: Callable[[], nn.Module]
    names: Dict[str, Tuple[str, ...]]
    kind: str
    output: str = "logits"


def _same(*names: str) -> Dict[str, Tuple[str, ...]]:
    return {"dynamo": names, "torchscript": names}


FAMILIES: Dict[str, Family] = {
    "llama": Family(lambda: _decoder("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=4),
                    _same("input_ids"), "lm"),
    "qwen2": Family(lambda: _decoder("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=4),
                    _same("input_ids"), "lm"),
    "phi3": Family(lambda: _decoder("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=4),
                   _same("input_ids"), "lm"),
    "gemma": Family(lambda: _decoder("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=4, head_dim=8),
                    _same("input_ids"), "lm"),
    # grouped-query attention: 4 query heads share 2 key/value heads
    "mistral_gqa": Family(lambda: _decoder("MistralConfig", "MistralForCausalLM", num_key_value_heads=2),
                          _same("input_ids"), "lm"),
    "bert": Family(lambda: _encoder("BertConfig", "BertForSequenceClassification"),
                   _same("input_ids", "attention_mask"), "cls"),
    "roberta": Family(lambda: _encoder("RobertaConfig", "RobertaForSequenceClassification", pad_token_id=1),
                      _same("input_ids", "attention_mask"), "cls"),
    "clip": Family(clip, _same("input_ids", "pixel_values"), "clip", "logits_per_image"),
    "whisper_encoder": Family(whisper, _same("input_features"), "audio"),
    "t5": Family(t5, _same("input_ids", "decoder_input_ids"), "seq2seq"),
    # GPT-2 through TorchScript with a mask: the call whose sdpa lowering emits IsNaN there
    "gpt2": Family(gpt2, {"dynamo": ("input_ids",), "torchscript": ("input_ids", "attention_mask")}, "lm"),
    "distilbert": Family(distilbert, _same("input_ids", "attention_mask"), "cls"),
    "vit": Family(vit, _same("pixel_values"), "image"),
    "swin": Family(swin, _same("pixel_values"), "image"),
}


def build(family: str, exporter: str = "dynamo", tied: bool = False) -> Tuple[nn.Module, Tuple[str, ...]]:
    """The seeded model, its parameters nudged apart (the exporters merge equal tensors: zero biases,
    LayerNorms' ones), and its input names."""
    fam = FAMILIES[family]
    torch.manual_seed(0)
    hf = gpt2(tied=True) if tied else fam.make()
    names = fam.names[exporter if exporter in fam.names else "dynamo"]
    model = Logits(hf, names, transpose=fam.kind in ("lm", "seq2seq"), output=fam.output)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return model, names


def _mask(n: int) -> np.ndarray:
    mask = np.ones((n, SEQ), np.int64)
    for i in range(n):
        mask[i, SEQ - i % 3:] = 0  # right padding of 0, 2 or 1 tokens
    return mask


def batches(family: str, names, steps: int):
    """``steps`` batches of (inputs in ``names`` order, labels)."""
    kind = FAMILIES[family].kind
    rng = np.random.default_rng(1)
    out = []
    for _ in range(steps):
        ids = rng.integers(3, VOCAB, (BATCH, SEQ)).astype(np.int64)
        pixels = rng.standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32)
        audio = rng.standard_normal((BATCH, 8, 2 * SEQ)).astype(np.float32)
        if kind == "clip":
            ids[:, -1] = SPECIAL["eos_token_id"]  # CLIP pools the text at its end-of-text token
        feeds = {"input_ids": ids, "attention_mask": _mask(BATCH), "decoder_input_ids": np.roll(ids, 1, axis=1),
                 "pixel_values": pixels, "input_features": audio}
        if kind in ("lm", "seq2seq"):
            y = (ids * 7 + 3) % VOCAB
        elif kind == "clip":
            y = np.arange(BATCH)
        elif kind == "image":
            y = (pixels[:, 0].mean((1, 2)) > 0).astype(np.int64) + (pixels[:, 1].mean((1, 2)) > 0)
        elif kind == "audio":
            y = (audio[:, 0].mean(1) > 0).astype(np.int64) + (audio[:, 1].mean(1) > 0)
        else:
            y = ids[:, 0] % 3
        out.append((tuple(feeds[n] for n in names), y.astype(np.int64)))
    return out


@contextlib.contextmanager
def quiet():
    """The exporters log and warn on every call."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def export(model, family: str, names, route: str, folder: str) -> str:
    """``model`` written to ``folder``/m.onnx by ``route``: "dynamo" / "torchscript" (a plain
    ``torch.onnx.export`` with that exporter's defaults) or "torch_export"."""
    (args, _), = batches(family, names, 1)
    path = os.path.join(folder, "m.onnx")
    example = tuple(torch.from_numpy(a) for a in args)
    with quiet():
        if route == "torch_export":
            import pytrain

            pytrain.torch_export(model, example, path, input_names=list(names), output_names=["output"])
        else:
            torch.onnx.export(model, example, path, dynamo=route == "dynamo", input_names=list(names),
                              output_names=["output"])
    return path
