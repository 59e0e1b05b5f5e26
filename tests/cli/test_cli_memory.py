"""``pytrain train`` refuses a run whose memory estimate is over ``pytrain.base.limits.max_heap_bytes`` before its
first step: a one-line error naming the estimate and the limit, and the checkpoint left as it was."""
from __future__ import annotations

import os

import numpy as np

from pytrain.base import limits
from pytrain.generator import models
from pytrain.cli import main


def test_train_over_the_heap_limit_is_refused_with_the_estimate_and_the_limit(tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 12)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=(x[:, 0] > 0).astype(np.int64))
    (tmp_path / "m.onnx").write_bytes(models.to_bytes(models.mlp(12, [16], 2, seed=0)))
    art = str(tmp_path / "art")
    assert main(["generate", str(tmp_path / "m.onnx"), "-o", art]) == 0
    checkpoint = open(os.path.join(art, "checkpoint"), "rb").read()
    capsys.readouterr()
    monkeypatch.setattr(limits, "max_heap_bytes", 1 << 10)
    code = main(["train", art, "--data", str(tmp_path / "d.npz"), "--epochs", "1", "--batch-size", "16", "--quiet"])
    out, err = capsys.readouterr()
    assert code != 0 and "Traceback" not in err
    assert "training this model needs" in err and "at batch size 16" in err
    assert "over pytrain's memory limit of 1024 bytes" in err and "PYTRAIN_MAX_HEAP_BYTES" in err
    assert open(os.path.join(art, "checkpoint"), "rb").read() == checkpoint
