"""``pytrain generate --lora RANK[:ALPHA] --lora-targets ...`` and ``pytrain export --lora merged|adapters|unmerged``
on a small MLP: only the adapters train, the merged export computes what the unmerged one does with the
original graph, and the adapters alone come out as an .npz or, for an output ending in .onnx, as an ONNX file
that puts the trained adapters back into a checkpoint."""
from __future__ import annotations

import os

import numpy as np

from pytrain.generator import models
from pytrain.device.api import CheckpointState
from pytrain.cli import main
from pytrain.engine.lora import load_adapters
from pytrain.proto import ModelProto
from pytrain.engine.runtime import InferenceSession


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_train_and_export_with_lora(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 12)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=(x[:, 0] > 0).astype(np.int64))
    (tmp_path / "m.onnx").write_bytes(models.to_bytes(models.mlp(12, [16], 2, seed=0)))
    art = str(tmp_path / "art")
    code, out, err = _run(capsys, "generate", tmp_path / "m.onnx", "-o", art, "--optimizer", "sgd",
                          "--lora", "4:8", "--lora-targets", "fc1", "fc2.weight")
    assert code == 0, err
    assert "LoRA: rank 4, alpha 8 on 2 weights: fc1.weight, fc2.weight" in out
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    assert sorted(n for n, p in state.parameters.items() if p.requires_grad) == [
        "fc1.lora_A", "fc1.lora_B", "fc2.lora_A", "fc2.lora_B"]
    code, _, err = _run(capsys, "train", art, "--data", tmp_path / "d.npz", "--epochs", "2", "--lr", "0.5",
                        "--batch-size", "16", "--quiet")
    assert code == 0, err

    for mode in ("merged", "unmerged", "adapters"):
        code, out, err = _run(capsys, "export", art, "-o", tmp_path / mode, "--lora", mode)
        assert code == 0, err
    merged = ModelProto.FromString((tmp_path / "merged").read_bytes())
    assert [n.op_type for n in merged.graph.node] == ["Gemm", "Relu", "Gemm"]
    outs = [InferenceSession(str(tmp_path / m)).run(None, {"input": x})[0] for m in ("merged", "unmerged")]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    with np.load(str(tmp_path / "adapters"), allow_pickle=False) as z:
        assert sorted(z.files) == ["fc1.lora_A", "fc1.lora_B", "fc2.lora_A", "fc2.lora_B", "pytrain.lora"]
        assert np.abs(z["fc2.lora_B"]).max() > 0
        trained = {n: z[n] for n in z.files if n != "pytrain.lora"}
    code, out, err = _run(capsys, "export", art, "-o", tmp_path / "adapters.onnx", "--lora", "adapters")
    assert code == 0, err
    fresh = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    for n in trained:   # the trained run's checkpoint with its adapters wiped
        fresh.parameters[n].data[...] = 0
    load_adapters(fresh, str(tmp_path / "adapters.onnx"))
    for n, v in trained.items():
        np.testing.assert_array_equal(fresh.parameters[n].data, v)


def test_lora_targets_without_lora_are_refused(tmp_path, capsys):
    (tmp_path / "m.onnx").write_bytes(models.to_bytes(models.mlp(12, [16], 2, seed=0)))
    code, _, err = _run(capsys, "generate", tmp_path / "m.onnx", "-o", tmp_path / "a", "--lora-targets", "fc1")
    assert code != 0 and "--lora-targets needs --lora" in err
    code, _, err = _run(capsys, "generate", tmp_path / "m.onnx", "-o", tmp_path / "a", "--lora", "4",
                        "--lora-targets", "nowhere")
    assert code != 0 and "'nowhere' matches no MatMul/Gemm" in err
