"""PyTorch models exported the way ORT's on-device-training docs export them (TRAINING mode, no
constant folding), and a reference trainer doing the same steps in torch."""
from __future__ import annotations

import io
import warnings

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(20, 32), nn.Linear(32, 16), nn.Linear(16, 5)

    def forward(self, x):
        return self.fc3(torch.sigmoid(self.fc2(torch.tanh(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # no bias before BatchNorm: it cancels, its true gradient is 0 and Adam would amplify noise
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=1)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(6 * 2 * 2, 4)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


class TokenModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, tokens):
        h = nn.functional.gelu(self.fc1(self.norm(self.emb(tokens))))
        return self.fc2(h.mean(dim=1))


def export(model: nn.Module, example: torch.Tensor, opset: int = 17) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), f, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          dynamo=False)
    return f.getvalue()


def sync_from_onnx(model: nn.Module, onnx_bytes: bytes) -> None:
    """Load the exported initializers into ``model``: a TRAINING-mode export runs the model while
    tracing, which moves BatchNorm's running statistics, so both sides start from the file."""
    import onnx
    from onnx import numpy_helper

    state = model.state_dict()
    for t in onnx.load_from_string(onnx_bytes).graph.initializer:
        if t.name in state:
            state[t.name].copy_(torch.from_numpy(numpy_helper.to_array(t).copy()))


def torch_steps(model: nn.Module, opt: torch.optim.Optimizer, batches, loss_fn=None, before_step=None) -> list:
    """Losses of len(batches) train steps in torch (x: an array or a tuple of arrays);
    ``before_step(i, model)`` runs before step i (e.g. to record the weights)."""
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    model.train()
    losses = []
    for i, (x, y) in enumerate(batches):
        if before_step is not None:
            before_step(i, model)
        opt.zero_grad()
        xs = x if isinstance(x, tuple) else (x,)
        loss = loss_fn(model(*(torch.from_numpy(a) for a in xs)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def seeded(cls, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return cls()


def as_numpy_state(model: nn.Module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
