"""Architectures nobody on the project wrote: torchvision and Hugging Face models (definitions only,
random init, nothing from a hub) and torch.nn layers, at the smallest sizes that still exercise
every layer, each with a data generator whose labels are a fixed function of the inputs."""
from __future__ import annotations

import sys
import types
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import nn


def stub_torchvision_ops() -> None:
    """Let torchvision's model definitions import without its C extension.

    The CI installs ``torchvision==0.28.0`` with ``--no-deps`` beside torch 2.13.0's CPU build; its
    compiled ops do not load there, and only ``torchvision._meta_registrations`` touches them at
    import time, so an empty module stands in for it. transformers imports torchvision whenever it
    is installed, so this runs before either is imported."""
    if "torchvision._meta_registrations" not in sys.modules:
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")


stub_torchvision_ops()


def import_torchvision():
    import torchvision

    return torchvision


class Case(NamedTuple):
    """One architecture: ``build()`` returns the seeded model; ``batches(n)`` n batches of
    (inputs tuple, target); ``loss`` is "ce", "ce_ignore" (labels -100 ignored) or "mse";
    ``chaotic``: float32 training of this net amplifies 1e-7 differences past 1e-3 within 10
    steps (measured by ``chaos``), so the parity test compares one step at a time.
    ``zero_grad``: {parameter: (start, stop) or None for all} elements whose true gradient is 0
    (an attention key's bias only shifts every score of a query by the same amount, which softmax
    cancels; MobileNetV2's projection BatchNorm bias only shifts channels that reach a later
    convolution + BatchNorm through linear paths, which cancels it): their gradient is rounding
    noise, which Adam scales up to steps of size lr in any direction."""
    build: Callable[[], nn.Module]
    batches: Callable[[int], List[Tuple[tuple, np.ndarray]]]
    loss: str
    input_names: Tuple[str, ...]
    chaotic: bool = False
    zero_grad: Dict[str, Optional[Tuple[int, int]]] = {}


def _seeded(fn: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return fn()
    return build


def _images(channels: int, size: int, classes: int, batch: int = 4):
    def make(n: int):
        rng = np.random.default_rng(1)
        out = []
        for _ in range(n):
            x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
            h = size // 2
            quads = [x[:, :, :h, :h], x[:, :, :h, h:], x[:, :, h:, :h], x[:, :, h:, h:]]
            score = np.stack([q.mean(axis=(1, 2, 3)) for q in quads], axis=1)
            out.append(((x,), (np.argmax(score, axis=1) % classes).astype(np.int64)))
        return out
    return make


def _reconstruct(channels: int, size: int, batch: int = 4):
    def make(n: int):
        rng = np.random.default_rng(1)
        out = []
        for _ in range(n):
            x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
            out.append(((x,), x.copy()))
        return out
    return make


def _sequences(features: int, length: int, classes: int, batch: int = 4):
    def make(n: int):
        rng = np.random.default_rng(1)
        out = []
        for _ in range(n):
            x = rng.standard_normal((batch, length, features)).astype(np.float32)
            out.append(((x,), np.argmax(x.mean(axis=1)[:, :classes], axis=1).astype(np.int64)))
        return out
    return make


def _tokens(vocab: int, length: int, classes: int, batch: int = 4, masked_lm: bool = False):
    def make(n: int):
        rng = np.random.default_rng(1)
        out = []
        for _ in range(n):
            ids = rng.integers(1, vocab, (batch, length)).astype(np.int64)
            mask = np.ones((batch, length), np.int64)
            mask[:, length - 2:] = 0  # padding at the end of every row
            if masked_lm:
                y = np.where(rng.random((batch, length)) < 0.4, (ids * 7) % vocab, -100).astype(np.int64)
                y[:, 0] = ids[:, 0]  # at least one label per row
            else:
                y = ((ids % 5 == 0).sum(axis=1) % classes).astype(np.int64)
            out.append(((ids, mask), y))
        return out
    return make


# ---- torch.nn models --------------------------------------------------------------------------

class _SequenceHead(nn.Module):
    """Runs ``body`` over (N, T, F) and classifies the mean over time."""

    def __init__(self, body: nn.Module, width: int, classes: int, kind: str) -> None:
        super().__init__()
        self.body, self.kind = body, kind
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        if self.kind == "mha":
            h = self.body(x, x, x, need_weights=False)[0]
        elif self.kind == "rnn":
            h = self.body(x)[0]
        else:
            h = self.body(x)
        return self.head(h.mean(dim=1))


class ConvAutoencoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc1 = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.enc2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.dec1 = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.dec2 = nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1, groups=2)

    def forward(self, x):
        h = torch.relu(self.enc2(torch.relu(self.enc1(x))))
        return self.dec2(torch.relu(self.dec1(h)))


class UNetBlock(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.down = nn.Conv2d(2, 4, 3, padding=1)
        self.mid = nn.Conv2d(4, 4, 3, padding=1)
        kw = {"align_corners": False} if mode == "bilinear" else {}
        self.up = nn.Upsample(scale_factor=2, mode=mode, **kw)
        self.out = nn.Conv2d(6, 2, 3, padding=1)

    def forward(self, x):
        d = torch.relu(self.down(x))
        m = torch.relu(self.mid(nn.functional.max_pool2d(d, 2)))
        return self.out(torch.cat([self.up(m), x], dim=1))


class DepthwiseCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 12, 1)
        self.fc = nn.Linear(12, 4)

    def forward(self, x):
        h = nn.functional.hardswish(self.stem(x))
        h = nn.functional.silu(self.dw(h))
        h = nn.functional.relu6(self.pw(h))
        return self.fc(h.mean(dim=(2, 3)))


class NormCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.c2 = nn.Conv2d(8, 6, 3, padding=1, bias=False)  # InstanceNorm cancels a bias: true gradient 0
        self.inorm = nn.InstanceNorm2d(6, affine=True)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = torch.relu(self.gn(self.c1(x)))
        h = torch.relu(self.inorm(self.c2(h)))
        return self.fc(h.mean(dim=(2, 3)))


# ---- torchvision ----------------------------------------------------------------------------------

def mobilenet_v2() -> nn.Module:
    return import_torchvision().models.mobilenet_v2(width_mult=0.35, num_classes=4, dropout=0.0)


class Transfer(nn.Module):
    """The fine-tuning recipe: a frozen backbone kept in eval mode (``train()`` leaves it there),
    only the classifier trains."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        for p in net.features.parameters():
            p.requires_grad_(False)
        self.train()

    def train(self, mode: bool = True) -> "Transfer":
        super().train(mode)
        self.net.features.eval()
        return self

    def forward(self, x):
        return self.net(x)


def mobilenet_v2_transfer() -> nn.Module:
    return Transfer(mobilenet_v2())


def resnet18() -> nn.Module:
    return import_torchvision().models.resnet18(num_classes=4)


# ---- Hugging Face transformers (tiny configs, random init) ------------------------------------------

VOCAB, SEQ = 40, 8


class _Logits(nn.Module):
    """A Hugging Face model taking (input_ids, attention_mask) and returning its logits; for a
    masked LM, as (N, vocab, T) so that the loss is torch's and ONNX's (N, C, d1) cross entropy."""

    def __init__(self, hf: nn.Module, transpose: bool = False) -> None:
        super().__init__()
        self.hf, self.transpose = hf, transpose

    def forward(self, input_ids, attention_mask):
        logits = self.hf(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits.transpose(1, 2) if self.transpose else logits


def bert() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=SEQ * 2, type_vocab_size=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3,
                     attn_implementation="eager")
    return _Logits(BertForSequenceClassification(cfg))


def mobilebert_mlm() -> nn.Module:
    from transformers import MobileBertConfig, MobileBertForMaskedLM

    cfg = MobileBertConfig(vocab_size=VOCAB, hidden_size=16, embedding_size=8, true_hidden_size=8,
                           intra_bottleneck_size=8, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=16, num_feedforward_networks=2, max_position_embeddings=SEQ * 2,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           attn_implementation="eager")
    return _Logits(MobileBertForMaskedLM(cfg), transpose=True)


CASES: Dict[str, Case] = {
    "mobilenet_v2_transfer": Case(_seeded(mobilenet_v2_transfer), _images(3, 32, 4), "ce", ("input",)),
    # BatchNorm over 4 samples of 1x1 maps at the end of both nets: PyTorch drifts 0.1-0.5 from itself
    "mobilenet_v2": Case(_seeded(mobilenet_v2), _images(3, 32, 4), "ce", ("input",), chaotic=True,
                         zero_grad=dict([("features.1.conv.2.bias", None)] +
                                        [("features.%d.conv.3.bias" % i, None) for i in range(2, 18)])),
    "resnet18": Case(_seeded(resnet18), _images(3, 16, 4), "ce", ("input",), chaotic=True),
    "transformer_encoder": Case(_seeded(lambda: _SequenceHead(nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=24, dropout=0.0, batch_first=True), 16, 3, "layer")),
        _sequences(16, 5, 3), "ce", ("input",), zero_grad={"body.self_attn.in_proj_bias": (16, 32)}),
    "multihead_attention": Case(_seeded(lambda: _SequenceHead(nn.MultiheadAttention(
        16, 2, batch_first=True), 16, 3, "mha")), _sequences(16, 5, 3), "ce", ("input",),
        zero_grad={"body.in_proj_bias": (16, 32)}),
    "gru": Case(_seeded(lambda: _SequenceHead(nn.GRU(6, 10, batch_first=True), 10, 3, "rnn")),
                _sequences(6, 5, 3), "ce", ("input",)),
    "lstm": Case(_seeded(lambda: _SequenceHead(nn.LSTM(6, 10, batch_first=True), 10, 3, "rnn")),
                 _sequences(6, 5, 3), "ce", ("input",)),
    "conv_autoencoder": Case(_seeded(ConvAutoencoder), _reconstruct(2, 8), "mse", ("input",)),
    "unet_nearest": Case(_seeded(lambda: UNetBlock("nearest")), _reconstruct(2, 8), "mse", ("input",)),
    "unet_bilinear": Case(_seeded(lambda: UNetBlock("bilinear")), _reconstruct(2, 8), "mse", ("input",)),
    "depthwise_cnn": Case(_seeded(DepthwiseCNN), _images(3, 12, 4), "ce", ("input",)),
    "group_instance_norm": Case(_seeded(NormCNN), _images(3, 8, 4), "ce", ("input",)),
    "bert": Case(_seeded(bert), _tokens(VOCAB, SEQ, 3), "ce", ("input_ids", "attention_mask"),
                 zero_grad={"hf.bert.encoder.layer.0.attention.self.key.bias": (0, 16)}),
    "mobilebert_mlm": Case(_seeded(mobilebert_mlm), _tokens(VOCAB, SEQ, 3, masked_lm=True), "ce_ignore",
                           ("input_ids", "attention_mask"),
                           zero_grad={"hf.mobilebert.encoder.layer.0.attention.self.key.bias": (0, 8)}),
}


def torch_loss(kind: str):
    if kind == "mse":
        return nn.MSELoss()
    return nn.CrossEntropyLoss(ignore_index=-100) if kind == "ce_ignore" else nn.CrossEntropyLoss()
