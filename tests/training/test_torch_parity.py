"""pytrain vs PyTorch: same exported model, same initial weights, same batches, same optimizer:
the loss at every one of 50 steps and the final weights agree within 1e-3 (relative)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pytrain.generator import artifacts  # noqa: E402
from train_helpers import train_steps  # noqa: E402
from torch_models import CNN, MLP, TokenModel, export, seeded, sync_from_onnx, torch_steps  # noqa: E402

STEPS = 50


def _batches(kind: str, n_steps: int, batch: int = 16, seed: int = 1):
    """Batches whose labels are a fixed function of the inputs, so there is something to learn."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_steps):
        if kind == "mlp":
            x = rng.standard_normal((batch, 20)).astype(np.float32)
            y = np.argmax(x[:, :5] + 0.5 * x[:, 5:10], axis=1)
        elif kind == "cnn":
            x = rng.standard_normal((batch, 1, 12, 12)).astype(np.float32)
            quadrants = [x[:, 0, :6, :6], x[:, 0, :6, 6:], x[:, 0, 6:, :6], x[:, 0, 6:, 6:]]
            y = np.argmax(np.stack([q.mean(axis=(1, 2)) for q in quadrants], axis=1), axis=1)
        else:
            x = rng.integers(0, 50, (batch, 7)).astype(np.int64)
            y = (x % 3 == 0).sum(axis=1) % 3
        out.append((x, y.astype(np.int64)))
    return out


CASES = {"mlp": MLP, "cnn": CNN, "tokens": TokenModel}
OPTIMS = {
    "sgd_momentum": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                     artifacts.SGD(momentum=0.9), 0.05),
    "adamw": (lambda p: torch.optim.AdamW(p, lr=1e-2), artifacts.AdamW(), 1e-2),
}


def _pytrain_steps(onnx_bytes, batches, optim, lr, frozen=None):
    arts = artifacts.generate_artifacts(onnx_bytes, frozen_params=frozen, optimizer=optim,
                                        requires_grad=None)
    losses, state = train_steps(arts, batches, lr)
    return losses, state, arts


@pytest.mark.parametrize("optim", sorted(OPTIMS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_curve_matches_torch(case, optim):
    make_torch_opt, pt_opt, lr = OPTIMS[optim]
    model = seeded(CASES[case])
    batches = _batches("mlp" if case == "mlp" else case, STEPS)
    example = torch.from_numpy(batches[0][0][:2])
    onnx_bytes = export(copy.deepcopy(model), example)
    sync_from_onnx(model, onnx_bytes)

    ref_losses = torch_steps(model, make_torch_opt(model.parameters()), batches)
    losses, state, _ = _pytrain_steps(onnx_bytes, batches, pt_opt, lr)

    np.testing.assert_allclose(losses, ref_losses, rtol=1e-3, atol=1e-5)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])  # it learned something
    ref = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    trained = [n for n, p in state.parameters.items() if p.requires_grad]
    assert len(trained) == len(list(model.parameters()))
    for name in trained:
        np.testing.assert_allclose(state.parameters[name].data, ref[name], rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    for name in ("bn1.running_mean", "bn1.running_var"):
        if name in state.parameters:  # running statistics follow torch's update too
            np.testing.assert_allclose(state.parameters[name].data, ref[name], rtol=1e-3, atol=1e-5)


def test_frozen_first_layer_transfer():
    model = seeded(MLP)
    for p in model.fc1.parameters():
        p.requires_grad_(False)
    batches = _batches("mlp", STEPS)
    onnx_bytes = export(copy.deepcopy(model), torch.from_numpy(batches[0][0][:2]))
    ref_losses = torch_steps(model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3),
                             batches)
    losses, state, arts = _pytrain_steps(onnx_bytes, batches, artifacts.AdamW(), 1e-3,
                                         frozen=["fc1.weight", "fc1.bias"])
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-3, atol=1e-5)
    ref = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    for name, p in state.parameters.items():
        np.testing.assert_allclose(p.data, ref[name], rtol=1e-3, atol=1e-4, err_msg=name)
    assert not state.parameters["fc1.weight"].requires_grad
    assert "fc1.weight" in arts.summary["frozen"]


@pytest.mark.parametrize("variant", ["adam_l2", "sgd_nesterov_wd", "adamw_clip", "sgd_plain"])
def test_optimizer_variants_match_torch(variant):
    model = seeded(MLP)
    batches = _batches("mlp", 30)
    onnx_bytes = export(copy.deepcopy(model), torch.from_numpy(batches[0][0][:2]))
    params = list(model.parameters())
    clip = None
    if variant == "adam_l2":
        ref_opt, ours, lr = torch.optim.Adam(params, lr=1e-2, weight_decay=0.05), artifacts.Adam(weight_decay=0.05), 1e-2
    elif variant == "sgd_nesterov_wd":
        ref_opt = torch.optim.SGD(params, lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3)
        ours, lr = artifacts.SGD(momentum=0.8, nesterov=True, weight_decay=1e-3), 0.05
    elif variant == "adamw_clip":
        ref_opt, ours, lr = torch.optim.AdamW(params, lr=1e-2), artifacts.AdamW(max_grad_norm=0.1), 1e-2
        clip = 0.1
    else:
        ref_opt, ours, lr = torch.optim.SGD(params, lr=0.1), artifacts.SGD(), 0.1
    ref_losses = []
    for x, y in batches:
        ref_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        ref_opt.step()
        ref_losses.append(float(loss.detach()))
    losses, state, _ = _pytrain_steps(onnx_bytes, batches, ours, lr)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-3, atol=1e-5)
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(state.parameters[name].data, value.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


class _ScaledLogits(torch.nn.Module):
    """Logits times exp(a rank-0 parameter), as CLIP's logit_scale."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(20, 5)
        self.logit_scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return self.fc(x) * self.logit_scale.exp()


@pytest.mark.parametrize("optim", ["adamw", "sgd_momentum"])
def test_rank0_parameter_trains_like_torch(optim):
    """A rank-0 parameter named in requires_grad trains (Adam's update kept a 0-d buffer a scalar and failed)."""
    model = seeded(_ScaledLogits)
    batches = _batches("mlp", 10)
    onnx_bytes = export(copy.deepcopy(model), torch.from_numpy(batches[0][0][:2]))
    make, ours, lr = OPTIMS[optim]
    arts = artifacts.generate_artifacts(onnx_bytes, optimizer=ours,
                                        requires_grad=[n for n, _ in model.named_parameters()])
    losses, state = train_steps(arts, batches, lr)
    want = torch_steps(model, make(list(model.parameters())), batches)
    np.testing.assert_allclose(losses, want, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(state.parameters["logit_scale"].data, model.logit_scale.detach().numpy(), rtol=1e-3)
