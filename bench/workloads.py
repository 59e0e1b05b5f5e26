"""The benchmark workloads: torch modules, their ONNX exports and fixed input batches.

Every runtime trains the same ONNX graph (or, for PyTorch and TF.js, the same
architecture with the same initial weights) on the same batch, so the first
step's loss must agree across runtimes; run.py reports it as a sanity check.
Only bench/torch_runner.py and run.py import this module (it needs torch);
runners in other environments read the files it writes.
"""
from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict

import numpy as np
import torch
from torch import nn

# torchvision's compiled ops do not load beside this torch build; only _meta_registrations touches
# them at import time (see tests/helpers/torch_zoo.py), and transformers imports torchvision when installed.
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))

BATCH = 64
CLASSES = 10
SEED = 0


class MLP(nn.Module):
    """784-128-10 with ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class LeNet(nn.Module):
    """LeNet-5 style CNN on 1x28x28 (no padding: 28 -> 24 -> 12 -> 8 -> 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class EmbLN(nn.Module):
    """Embedding(1000, 64) over 32 tokens -> LayerNorm -> mean over tokens -> Linear 10."""

    VOCAB, DIM, TOKENS = 1000, 64, 32

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(self.VOCAB, self.DIM)
        self.norm = nn.LayerNorm(self.DIM)
        self.head = nn.Linear(self.DIM, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.emb(tokens)).mean(dim=1))


class MobileNetTransfer(nn.Module):
    """The personalisation case: torchvision's MobileNetV2 (width 0.35) on 3x96x96, its backbone
    frozen and kept in inference mode (BatchNorm on running statistics, ``train()`` leaves it
    there), only the classifier (Dropout 0 so every runtime computes the same) trains."""

    def __init__(self) -> None:
        super().__init__()
        import torchvision

        self.net = torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=CLASSES, dropout=0.0)
        for p in self.net.features.parameters():
            p.requires_grad_(False)
        self.train()

    def train(self, mode: bool = True) -> "MobileNetTransfer":
        super().train(mode)
        self.net.features.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyBert(nn.Module):
    """Hugging Face BertForSequenceClassification from a tiny config (BERT-tiny's shape: 2 layers,
    hidden 128, 2 heads, FFN 512; vocabulary 1000), random init, dropout 0, every token attended
    (no attention mask input), all parameters train."""

    VOCAB, TOKENS = 1000, 32

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertForSequenceClassification

        cfg = BertConfig(vocab_size=self.VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=512, max_position_embeddings=64, type_vocab_size=2,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=CLASSES,
                         attn_implementation="eager")
        self.hf = BertForSequenceClassification(cfg)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids).logits


class TinyGPT2(nn.Module):
    """Hugging Face GPT2LMHeadModel from a tiny config (2 layers, n_embd 128, 2 heads, vocabulary 1000,
    64 positions), random init, dropout 0, eager attention; logits as (N, vocab, T) so the loss is the
    per-token cross entropy against (N, T) labels. Fine-tuned with LoRA (``LORA``) in every runtime."""

    VOCAB, TOKENS = 1000, 64

    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=self.VOCAB, n_embd=128, n_layer=2, n_head=2, n_positions=self.TOKENS,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                         attn_implementation="eager")
        self.hf = GPT2LMHeadModel(cfg)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids).logits.transpose(1, 2)


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type = nn.ReLU) -> nn.Sequential:
    """Conv (no bias) -> BatchNorm -> activation, 'same' padding."""
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), act())


class _SqueezeExcite(nn.Module):
    """MobileNetV3's squeeze-excite: global average pool -> 1x1 reduce, ReLU -> 1x1 expand, hard-sigmoid
    -> times the input."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, max(8, c // 4), 1)
        self.fc2 = nn.Conv2d(max(8, c // 4), c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, stride: int) -> None:
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        layers = [] if exp == cin else [_conv_bn(cin, exp, 1, act=act)]
        layers += [_conv_bn(exp, exp, k, stride, groups=exp, act=act)]
        if se:
            layers.append(_SqueezeExcite(exp))
        layers += [nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3Cls(nn.Module):
    """The OCR text-direction classifier's kind: MobileNetV3-small's blocks (hard-swish, depthwise
    convs, squeeze-excite with hard-sigmoid) at width 0.5 on a 3x48x192 text line, then global
    pooling, a 1x1 conv with hard-swish and a linear classifier."""

    # kernel, expansion, out, squeeze-excite, hard-swish, stride (MobileNetV3-small at width 0.5)
    BLOCKS = [(3, 8, 8, True, False, 2), (3, 40, 16, False, False, 2), (3, 48, 16, False, False, 1),
              (5, 48, 24, True, True, 2), (5, 120, 24, True, True, 1), (5, 120, 24, True, True, 1),
              (5, 64, 24, True, True, 1), (5, 72, 24, True, True, 1), (5, 144, 48, True, True, 2),
              (5, 288, 48, True, True, 1), (5, 288, 48, True, True, 1)]

    def __init__(self) -> None:
        super().__init__()
        layers: list = [_conv_bn(3, 8, 3, 2, act=nn.Hardswish)]
        c = 8
        for k, exp, out, se, hs, stride in self.BLOCKS:
            layers.append(_InvertedResidual(c, k, exp, out, se, hs, stride))
            c = out
        layers.append(_conv_bn(c, 288, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Conv2d(288, 256, 1), nn.Hardswish())
        self.fc = nn.Linear(256, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.fc(torch.flatten(self.head(x), 1))


class DBNetHead(nn.Module):
    """A DBNet-style text detector on 3x160x160: a small strided conv backbone (1/4 .. 1/16), an FPN
    (1x1 laterals, nearest Resize x2 upsampling and adds, 3x3 smoothing, Resize to 1/4 and Concat),
    and DB's head: 3x3 conv -> BatchNorm -> ReLU -> ConvTranspose 2x2/2 -> BatchNorm -> ReLU ->
    ConvTranspose 2x2/2 to 2-class (text / background) logits at full resolution."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 16, 3, 2), _conv_bn(16, 16, 3, 2))
        self.c3 = _conv_bn(16, 32, 3, 2)
        self.c4 = _conv_bn(32, 64, 3, 2)
        inner = 32
        self.lat = nn.ModuleList([nn.Conv2d(c, inner, 1, bias=False) for c in (16, 32, 64)])
        self.smooth = nn.ModuleList([nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in range(3)])
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Sequential(_conv_bn(inner * 3 // 4, 16, 3),
                                  nn.ConvTranspose2d(16, 16, 2, 2), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.ConvTranspose2d(16, 2, 2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f2 = self.stem(x)
        f3 = self.c3(f2)
        f4 = self.c4(f3)
        p4 = self.lat[2](f4)
        p3 = self.lat[1](f3) + self.up(p4)
        p2 = self.lat[0](f2) + self.up(p3)
        up4 = nn.functional.interpolate(self.smooth[2](p4), scale_factor=4, mode="nearest")
        fuse = torch.cat([self.smooth[0](p2), self.up(self.smooth[1](p3)), up4], 1)
        return self.head(fuse)


class CRNN(nn.Module):
    """A CRNN text-line recogniser on 1x32x128: VGG-style convs (height 32 -> 1, width 128 -> 32
    steps), a bidirectional LSTM (hidden 64), a linear per-step classifier: logits (N, classes, T)
    against per-step labels (the CTC head's per-frame scores, trained frame-wise here)."""

    HIDDEN = 64

    def __init__(self) -> None:
        super().__init__()
        self.cnn = nn.Sequential(_conv_bn(1, 16, 3), nn.MaxPool2d(2, 2),          # 16 x 64
                                 _conv_bn(16, 32, 3), nn.MaxPool2d(2, 2),         # 8 x 32
                                 _conv_bn(32, 64, 3), _conv_bn(64, 64, 3), nn.MaxPool2d((2, 1), (2, 1)),  # 4 x 32
                                 _conv_bn(64, 96, 3), nn.MaxPool2d((4, 1), (4, 1)))   # 1 x 32
        self.rnn = nn.LSTM(96, self.HIDDEN, bidirectional=True, batch_first=False)
        self.fc = nn.Linear(2 * self.HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)          # (T, N, C)
        y, _ = self.rnn(f)
        return self.fc(y).permute(1, 2, 0)                   # (N, classes, T)


#: the LoRA of the LoRA workloads: peft's LoraConfig(r, lora_alpha, target_modules) and pytrain's
#: LoRA(rank, alpha, targets); the runners read it from lora.json beside the model
LORA = {"rank": 8, "alpha": 16, "targets": ["c_attn"]}


@dataclass(frozen=True)
class Workload:
    name: str
    make: Callable[[], nn.Module]
    input_shape: tuple
    input_dtype: str  # numpy dtype name of the model input
    vocab: int = EmbLN.VOCAB  # token ids are drawn from [0, vocab) for int64 inputs
    lora: bool = False  # fine-tuned with LoRA: labels are the next token of every position, (N, T)
    label_shape: tuple = ()  # dense labels: (N,) + label_shape, drawn from [0, classes)
    classes: int = CLASSES
    shipped: bool = False  # exported in inference mode like a pretrained file (BatchNorm on its
    # running statistics); every parameter fine-tunes

    def module(self) -> nn.Module:
        """The module with its deterministic initial weights."""
        torch.manual_seed(SEED)
        return self.make()

    def batch(self) -> Dict[str, np.ndarray]:
        """The fixed training batch: 'input' and int64 'labels' [batch size]."""
        rng = np.random.default_rng(SEED)
        if self.input_dtype == "int64":
            x = rng.integers(0, self.vocab, size=self.input_shape, dtype=np.int64)
        else:  # pixels in [0, 1)
            x = rng.random(self.input_shape, dtype=np.float32)
        labels = rng.integers(0, self.classes, size=(self.input_shape[0],) + self.label_shape, dtype=np.int64)
        if self.lora:
            labels = np.roll(x, -1, axis=1)
        return {"input": x, "labels": labels}


WORKLOADS: Dict[str, Workload] = {
    "mlp": Workload("mlp", MLP, (BATCH, 784), "float32"),
    "cnn": Workload("cnn", LeNet, (BATCH, 1, 28, 28), "float32"),
    "emb": Workload("emb", EmbLN, (BATCH, EmbLN.TOKENS), "int64"),
    # real models; the smaller batch of MobileNetV2 is the personalisation case (a few photos a step)
    "mobilenet": Workload("mobilenet", MobileNetTransfer, (16, 3, 96, 96), "float32"),
    "bert": Workload("bert", TinyBert, (32, TinyBert.TOKENS), "int64", vocab=TinyBert.VOCAB),
    "gpt2_lora": Workload("gpt2_lora", TinyGPT2, (8, TinyGPT2.TOKENS), "int64", vocab=TinyGPT2.VOCAB, lora=True),
    # the CNNs of OCR packages (issue 32), shipped as inference files and fine-tuned whole
    "mobilenetv3": Workload("mobilenetv3", MobileNetV3Cls, (8, 3, 48, 192), "float32", shipped=True),
    "dbnet": Workload("dbnet", DBNetHead, (2, 3, 160, 160), "float32", label_shape=(160, 160), classes=2,
                      shipped=True),
    "crnn": Workload("crnn", CRNN, (8, 1, 32, 128), "float32", label_shape=(32,), shipped=True),
}

# the CNNs of issue 32: their rows also time inference (bench/cnn_speed.py)
OCR_WORKLOADS = ("mobilenetv3", "dbnet", "crnn")

# the LoRA workloads: native rows only, pytrain and PyTorch + peft (keep in sync with run.py's)
LORA_WORKLOADS = tuple(n for n, w in WORKLOADS.items() if w.lora)

# the architectures pages/tfjs_models.js rebuilds in TF.js (the real models have no TF.js row)
TFJS_WORKLOADS = ("mlp", "cnn", "emb")

# Hyper-parameters every runtime uses (torch.optim.AdamW defaults but the lr).
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}


def export_onnx(w: Workload) -> bytes:
    """ONNX opset 17 export of the workload's module in training mode (a frozen backbone stays in
    inference mode) by ``pytrain.torch_export``: TorchScript exporter, parameters under their
    state_dict names, the frozen ones listed in the model's metadata; fixed batch size."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pytrain.generator.torch_export import torch_export

    m = w.module().eval() if w.shipped else w.module().train()
    return torch_export(m, (torch.from_numpy(w.batch()["input"]),), input_names=["input"],
                        output_names=["logits"], opset=17, dynamic_batch=False)


def peft_model(model: nn.Module) -> nn.Module:
    """``model`` with peft's LoRA adapters (``LORA``): only they train."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=LORA["rank"], lora_alpha=LORA["alpha"],
                                            target_modules=LORA["targets"], lora_dropout=0.0))


def param_lists(w: Workload) -> Dict[str, list]:
    """{"trainable": the parameters PyTorch trains, "frozen": its other parameters and float
    buffers}: what a runtime that does not read pytrain's metadata (ORT) is told to train."""
    m = w.module().train()
    trainable = [k for k, p in m.named_parameters() if p.requires_grad]
    frozen = [k for k, v in m.state_dict().items() if k not in trainable and v.is_floating_point()]
    return {"trainable": trainable, "frozen": frozen}


def tf_weights(w: Workload) -> Dict[str, np.ndarray]:
    """Initial weights laid out for TF.js (NHWC convs, [in, out] dense kernels)."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in w.module().state_dict().items()}
    out: Dict[str, np.ndarray] = {}
    for k, v in sd.items():
        if v.ndim == 4:  # conv [out, in, kh, kw] -> [kh, kw, in, out]
            out[k] = v.transpose(2, 3, 1, 0)
        elif v.ndim == 2 and not k.startswith("emb."):  # linear [out, in] -> [in, out]
            out[k] = v.T
        else:
            out[k] = v
    if w.name == "cnn":
        # torch flattens (C, H, W); the NHWC graph flattens (H, W, C).
        k = out["fc1.weight"].reshape(16, 4, 4, 120).transpose(1, 2, 0, 3)
        out["fc1.weight"] = k.reshape(256, 120)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def _write_blob(arrays: Dict[str, np.ndarray], bin_path: Path, json_path: Path) -> None:
    """Concatenate arrays into one binary file plus a JSON manifest {name: {shape, dtype, offset}}."""
    manifest, offset = {}, 0
    with open(bin_path, "wb") as f:
        for name, a in arrays.items():
            raw = np.ascontiguousarray(a).tobytes()
            manifest[name] = {"shape": list(a.shape), "dtype": str(a.dtype), "offset": offset,
                              "nbytes": len(raw)}
            f.write(raw)
            offset += len(raw)
    json_path.write_text(json.dumps(manifest))


def write_inputs(w: Workload, directory: Path) -> Dict[str, Path]:
    """Write model.onnx, batch.npz and the binary copies the browser pages fetch."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"onnx": directory / "model.onnx", "npz": directory / "batch.npz"}
    paths["onnx"].write_bytes(export_onnx(w))
    (directory / "params.json").write_text(json.dumps(param_lists(w)))
    if w.lora:
        (directory / "lora.json").write_text(json.dumps(LORA))
    b = w.batch()
    np.savez(paths["npz"], **b)
    _write_blob(b, directory / "batch.bin", directory / "batch.json")
    if w.name in TFJS_WORKLOADS:
        _write_blob(tf_weights(w), directory / "tf_weights.bin", directory / "tf_weights.json")
    return paths
