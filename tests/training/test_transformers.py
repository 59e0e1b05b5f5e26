"""Hugging Face transformers as people export them, beyond the families' parity test
(``test_transformer_families.py``): ViT with eager attention through the default exporter, and
``pytrain.torch_export`` where TorchScript cannot export (GPT-2 called with ``input_ids`` alone) or where
the dynamo exporter's optimizer would fold BatchNorm and merge equal tensors.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

from hf_families import batches, build, export  # noqa: E402
from pytrain.generator import artifacts  # noqa: E402
from test_architectures import match  # noqa: E402
from torch_models import torch_steps  # noqa: E402
from train_helpers import train_steps  # noqa: E402

nn = torch.nn

STEPS, LR = 5, 0.05


def test_vit_eager_folded_mask_does_not_train(tmp_path):
    """Issue 21, item 3: ViT with eager attention through the default exporter carries an all-zero
    initializer ``where`` (the attention mask the exporter computed) added to the scores; the graph
    signature does not list it, so it does not train; the ``cls_token`` the exporter folded (expanded to the
    batch) trains as itself, so what trains is every parameter."""
    model, names = build("vit", "dynamo")
    model.hf.config._attn_implementation = "eager"
    path = export(model, "vit", names, "dynamo", str(tmp_path))
    _, lost = match(model, path)
    assert lost == ["hf.vit.embeddings.cls_token"]
    summary = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss).summary
    report = {r["name"]: r for r in summary["initializers"]}
    assert not report["where"]["trains"] and "not in its graph signature" in report["where"]["why"]
    assert [(t["parameter"], t["how"]) for t in summary["tied"]] == [("hf.vit.embeddings.cls_token", "expand")]
    assert summary["trainable_count"] == sum(p.numel() for p in model.parameters())


# ---- pytrain.torch_export when TorchScript cannot export (issue 21, item 2) ---------------------------

def _export_route(path: str) -> str:
    return {p.key: p.value for p in onnx.load(path).metadata_props}["pytrain.export_route"]


def _trains_every_parameter_like_torch(model, path: str, data):
    """Every parameter trains by default, and 5 SGD steps give PyTorch's losses; returns pytrain's state."""
    arts = artifacts.generate_artifacts(path, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.SGD)
    assert arts.summary["trainable_count"] == sum(p.numel() for p in model.parameters())
    losses, state = train_steps(arts, data, LR)
    want = torch_steps(model, torch.optim.SGD(model.parameters(), lr=LR), data)
    np.testing.assert_allclose(losses, want, rtol=1e-3, atol=1e-6)
    return state


def test_torch_export_falls_back_to_dynamo_for_gpt2_called_with_input_ids(tmp_path):
    """GPT-2 called as in training (no cache) with input_ids alone: transformers' packed-sequence check
    uses aten::diff, which TorchScript lacks; torch_export says so and takes the dynamo exporter, with
    every parameter separate under its state_dict name, a symbolic batch, and PyTorch's training."""
    import pytrain

    model, names = build("gpt2", "dynamo")
    model.hf.config.use_cache = False
    data = batches("gpt2", names, STEPS)
    path = os.path.join(str(tmp_path), "m.onnx")
    example = tuple(torch.from_numpy(a[:2]) for a in data[0][0])  # another batch size than training's
    with pytest.warns(UserWarning, match="aten::diff.*dynamo exporter"):
        pytrain.torch_export(model, example, path, input_names=list(names))
    assert _export_route(path).startswith("dynamo: the TorchScript exporter failed")
    proto = onnx.load(path)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    inits = {t.name for t in proto.graph.initializer}
    assert {n for n, _ in model.named_parameters()} <= inits
    _trains_every_parameter_like_torch(model, path, data)


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
    data = [((rng.standard_normal((4, 2, 6, 7)).astype(np.float32),), rng.integers(0, 3, 4).astype(np.int64))
               for _ in range(3)]
    with pytest.warns(UserWarning, match="dynamo exporter"):
        pytrain.torch_export(model, torch.from_numpy(data[0][0][0]), path)
    assert _export_route(path).startswith("dynamo")
    proto = onnx.load(path)
    assert [n.op_type for n in proto.graph.node].count("BatchNormalization") == 1
    assert {n for n in model.state_dict() if "num_batches" not in n} <= {t.name for t in proto.graph.initializer}
    state = _trains_every_parameter_like_torch(model, path, data)
    np.testing.assert_allclose(state.parameters["bn.running_mean"].data, model.bn.running_mean.numpy(),
                               rtol=1e-4, atol=1e-6)
