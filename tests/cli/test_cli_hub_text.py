"""``pytrain train --text`` on models as the Hugging Face Hub has them (tests/fixtures/hub, exported by Optimum with
the Hub's default task, with or without past): the first step's loss is transformers' loss on the same blocks (the
positions and the empty past fed as transformers feeds them, :mod:`pytrain.text.hub_inputs`), and the run exports a
model that keeps the past's inputs and the present's outputs."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx")

from hub_fixtures import CORPUS, first_batch_loss, hub  # noqa: E402

from pytrain.cli import main  # noqa: E402


def _step_losses(log):
    return [r["loss"] for r in map(json.loads, open(log, encoding="utf-8")) if r["kind"] == "step"]


@pytest.mark.parametrize("name,lora", [("gpt2", []), ("phi3-no-past", []), ("qwen2", ["--lora", "4:8", "--lora-targets", "q_proj", "v_proj"])])
def test_the_clis_first_loss_is_transformers_loss_on_the_same_blocks(capsys, tmp_path, name, lora):
    h = hub(name)
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    arts = tmp_path / "arts"
    assert main(["generate", str(h.path), "-o", str(arts), "--loss", "clm"] + lora) == 0
    code = main(["train", str(arts), "--text", str(tmp_path / "corpus.txt"), "--tokenizer", str(h.tokenizer),
                 "--block-size", "16", "--batch-size", "4", "--epochs", "1", "--quiet", "--log",
                 str(tmp_path / "log.jsonl")])
    assert code == 0, capsys.readouterr().err
    losses = _step_losses(tmp_path / "log.jsonl")
    np.testing.assert_allclose(losses[0], first_batch_loss(h.oracle, 4), rtol=1e-5)
    assert main(["export", str(arts), "-o", str(tmp_path / "out.onnx")]) == 0
    import onnx

    got, want = onnx.load(str(tmp_path / "out.onnx")).graph, onnx.load(str(h.path)).graph
    assert [i.name for i in got.input] == [i.name for i in want.input]
    assert [o.name for o in got.output] == [o.name for o in want.output]
