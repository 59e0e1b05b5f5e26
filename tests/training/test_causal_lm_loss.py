"""``loss="CausalLMLoss"``: next-token cross-entropy read from the logits and the model's own ``input_ids``
(no label input), on a tiny GPT-2 exported by ``pytrain.torch_export``, against transformers'
``GPT2LMHeadModel(input_ids, labels=input_ids).loss`` (1e-5), with a pad id ignored as transformers
ignores labels of -100, and three SGD steps of every weight against torch's from identical weights."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from pytrain.generator import artifacts  # noqa: E402
from pytrain.device.api import CheckpointState, Module, Optimizer  # noqa: E402
from pytrain.errors import ArtifactError  # noqa: E402
from tiny_lm import LENGTH  # noqa: E402


def _ids(vocab: int, n: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, vocab, (n, LENGTH)).astype(np.int64)


def _module(lm, **kw):
    arts = artifacts.generate_artifacts(lm.onnx, loss="CausalLMLoss", optimizer=artifacts.SGD(), **kw)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    return arts, state, Module(arts.training_model, state, arts.eval_model)


def _loss(out) -> float:
    return float(np.asarray(out[0] if isinstance(out, list) else out))


def _torch_loss(hf, ids: np.ndarray, pad=None) -> torch.Tensor:
    labels = torch.from_numpy(ids.copy())
    if pad is not None:
        labels[labels == pad] = -100
    return hf(input_ids=torch.from_numpy(ids), labels=labels).loss


def test_the_training_model_takes_only_the_ids_and_its_loss_is_transformers_lm_loss(lm):
    arts, _, module = _module(lm)
    assert module.input_names() == ["input_ids"]
    ids = _ids(lm.vocab_size)
    module.eval()
    got = _loss(module(ids))
    with torch.no_grad():
        want = float(_torch_loss(lm.torch_model, ids))
    assert abs(got - want) < 1e-5


def test_a_pad_id_adds_nothing_as_transformers_ignores_labels_of_minus_100(lm):
    pad = 5
    ids = _ids(lm.vocab_size, seed=1)
    ids[ids == pad] = 6
    ids[0, 10:] = pad
    ids[2, 4:] = pad
    from pytrain.generator.losses import CausalLMLoss
    arts = artifacts.generate_artifacts(lm.onnx, loss=CausalLMLoss(ignore_index=pad), optimizer=artifacts.SGD())
    padded = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    padded.eval()
    got = _loss(padded(ids))
    with torch.no_grad():
        want = float(_torch_loss(lm.torch_model, ids, pad))
        unpadded = float(_torch_loss(lm.torch_model, ids))
    assert abs(got - want) < 1e-5 and abs(want - unpadded) > 1e-3


def test_three_sgd_steps_of_every_weight_equal_torch(lm):
    import copy

    arts, state, module = _module(lm)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.5)
    ref = copy.deepcopy(lm.torch_model).train()
    topt = torch.optim.SGD(ref.parameters(), lr=0.5)
    ours, theirs = [], []
    ids = _ids(lm.vocab_size, seed=10)
    for _ in range(3):
        module.train()
        ours.append(_loss(module(ids)))
        opt.step()
        module.lazy_reset_grad()
        topt.zero_grad()
        loss = _torch_loss(ref, ids)
        loss.backward()
        topt.step()
        theirs.append(float(loss.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert ours[-1] < ours[0]
    want = ref.lm_head.weight.detach().numpy()
    np.testing.assert_allclose(state.parameters["hf.lm_head.weight"].data, want, atol=1e-5)


def test_refuses_a_model_without_the_ids_input(lm):
    from pytrain.generator.losses import CausalLMLoss
    with pytest.raises(ArtifactError, match="'tokens'"):
        artifacts.generate_artifacts(lm.onnx, loss=CausalLMLoss(ids_name="tokens"))


def test_the_cli_generates_a_causal_lm_loss_by_name(lm, tmp_path, capsys):
    from pytrain.cli import main

    (tmp_path / "lm.onnx").write_bytes(lm.onnx)
    code = main(["generate", str(tmp_path / "lm.onnx"), "-o", str(tmp_path / "art"), "--loss", "clm",
                 "--optimizer", "sgd", "--lora", "4", "--lora-targets", "c_attn"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "CausalLMLoss" in out
    from pytrain.device.api import Module
    state = CheckpointState.load_checkpoint(str(tmp_path / "art" / "checkpoint"))
    module = Module(str(tmp_path / "art" / "training_model.onnx"), state, str(tmp_path / "art" / "eval_model.onnx"))
    assert module.input_names() == ["input_ids"]
    ids = _ids(lm.vocab_size)
    module.eval()
    with torch.no_grad():
        assert abs(_loss(module(ids)) - float(_torch_loss(lm.torch_model, ids))) < 1e-5   # adapters start at zero
