"""``pytrain train`` on text (pytrain.run.text): a tiny GPT-2 (tests/helpers/tiny_lm.py) with LoRA trains on a text
file and its tokenizer.json (its first loss is transformers' on the same block, its loss falls), resumes with the
uninterrupted run's next losses, and continues the page's "Your text" run file with the tab's own next losses; a
tiny BERT classifier trains on a CSV of texts and labels; what does not fit is refused naming why."""
from __future__ import annotations

import io
import json
import re
import shutil
import zipfile

import numpy as np
import pytest

pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from pytrain.device.api import CheckpointState  # noqa: E402
from pytrain.cli import main  # noqa: E402
from pytrain.run.loop import epoch_batches  # noqa: E402
from tiny_lm import CSV, LENGTH, TEXT, tiny_bert_classifier  # noqa: E402

TRAIN = ["--batch-size", "4", "--lr", "0.02", "--quiet"]


@pytest.fixture(scope="module")
def files(lm, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    (d / "m.onnx").write_bytes(lm.onnx)
    (d / "tokenizer.json").write_text(lm.tokenizer_json, encoding="utf-8")
    (d / "corpus.txt").write_text(TEXT, encoding="utf-8")
    (d / "texts.csv").write_text(CSV, encoding="utf-8")
    arts = d / "arts"
    assert main(["generate", str(d / "m.onnx"), "-o", str(arts), "--loss", "clm", "--lora", "4:8",
                 "--lora-targets", "c_attn", "lm_head"]) == 0
    return d


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _text(files, *more):
    return ["--text", files / "corpus.txt", "--tokenizer", files / "tokenizer.json"] + list(more)


def _step_losses(log):
    return [r["loss"] for r in map(json.loads, open(log, encoding="utf-8")) if r["kind"] == "step"]


def test_a_causal_lm_trains_on_a_text_file_and_resumes_with_the_same_next_losses(capsys, files, lm, tmp_path):
    import torch

    full, half = tmp_path / "full", tmp_path / "half"
    shutil.copytree(files / "arts", full)
    shutil.copytree(files / "arts", half)
    code, out, err = _run(capsys, "train", full,
                          *_text(files, "--epochs", "4", "--log", tmp_path / "full.jsonl", *TRAIN))
    assert code == 0, err
    losses = _step_losses(tmp_path / "full.jsonl")
    assert len(losses) == 16 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.3, losses

    # the first step's loss is transformers' next-token loss on the same blocks (LoRA's B starts at 0)
    ids = tokenizers.Tokenizer.from_str(lm.tokenizer_json).encode(TEXT, add_special_tokens=False).ids
    blocks = np.asarray(ids[:len(ids) // LENGTH * LENGTH], dtype=np.int64).reshape(-1, LENGTH)
    first = torch.from_numpy(blocks[epoch_batches(len(blocks), 0, 0, 4)[0]])
    with torch.no_grad():
        want = float(lm.torch_model(input_ids=first, labels=first).loss)
    np.testing.assert_allclose(losses[0], want, rtol=1e-4)

    code, _, err = _run(capsys, "train", half, *_text(files, "--epochs", "2", *TRAIN))
    assert code == 0, err
    code, _, err = _run(capsys, "train", half, *_text(files, "--epochs", "4", "--resume", "--quiet",
                                                      "--log", tmp_path / "half.jsonl"))
    assert code == 0, err
    assert _step_losses(tmp_path / "half.jsonl") == losses[8:]
    props = CheckpointState.load_checkpoint(str(half / "checkpoint")).properties
    assert json.loads(props["pytrain.train"])["block_size"] == LENGTH and props["step"] == 16


@pytest.mark.parametrize("kind", ["text", "text_csv"])
def test_the_tabs_text_run_file_continues_in_the_cli_with_the_tabs_next_losses(capsys, lm, tmp_path, kind):
    from pytrain.webapp import Session

    s = Session()
    s.configure(batch_size=4, lr=0.01)
    if kind == "text":
        s.text("use", model=lm.onnx, tokenizer=lm.tokenizer_json, text=TEXT, val_fraction=0.2,
               lora={"rank": 4, "alpha": 8, "targets": ["c_attn"]})
    else:
        s.text("use", model=tiny_bert_classifier(lm.vocab_size, classes=3, length=LENGTH), tokenizer=lm.tokenizer_json,
               csv=CSV, val_fraction=0.25, lora={"rank": 4, "alpha": 8})
    s.train_for(budget_ms=1e9, max_steps=3)
    member = "text.txt" if kind == "text" else "text.csv"
    with zipfile.ZipFile(io.BytesIO(s.run_file(epochs=2))) as z:
        assert not z.comment and {"tokenizer.json", member} <= set(z.namelist())
        z.extractall(tmp_path / "run")
    run = tmp_path / "run"
    code, out, err = _run(capsys, "train", run, "--" + kind.replace("_", "-"), run / member, "--tokenizer",
                          run / "tokenizer.json", "--resume", "--log", tmp_path / "cli.jsonl")
    assert code == 0, err
    assert ("val perplexity" if kind == "text" else "val accuracy") in out
    cli = _step_losses(tmp_path / "cli.jsonl")
    tab = []
    while s.run.at.epoch < 2:
        tab += s.train_for(budget_ms=1e9, max_steps=100)["losses"]
    assert cli == tab and len(cli) >= 3


def test_a_text_classifier_trains_on_a_csv_of_texts_and_labels(capsys, files, lm, tmp_path):
    (tmp_path / "bert.onnx").write_bytes(tiny_bert_classifier(lm.vocab_size, classes=3, length=LENGTH))
    arts = tmp_path / "arts"
    assert main(["generate", str(tmp_path / "bert.onnx"), "-o", str(arts)]) == 0
    code, out, err = _run(capsys, "train", arts, "--text-csv", files / "texts.csv", "--tokenizer",
                          files / "tokenizer.json", "--epochs", "6", "--batch-size", "8", "--lr", "0.01",
                          "--validation-split", "0.25", "--log", tmp_path / "log.jsonl")
    assert code == 0, err
    assert "val accuracy" in out
    losses = _step_losses(tmp_path / "log.jsonl")
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.2, losses
    props = CheckpointState.load_checkpoint(str(arts / "checkpoint")).properties
    assert json.loads(props["pytrain.classes"]) == ["bird", "cat", "dog"]


def test_refuses_text_runs_that_do_not_fit_naming_why(capsys, files, tmp_path):
    from pytrain.generator import models

    arts = files / "arts"
    (tmp_path / "mlp.onnx").write_bytes(models.to_bytes(models.mlp(6, [8], 3, seed=0)))
    mlp = tmp_path / "mlp"
    assert main(["generate", str(tmp_path / "mlp.onnx"), "-o", str(mlp)]) == 0
    cases = [
        (["train", arts, "--data", files / "texts.csv"], "causal language model .* give --text FILE"),
        (["train", arts, "--text", files / "corpus.txt"], "give --tokenizer tokenizer.json"),
        (["train", arts, "--text-csv", files / "texts.csv", "--tokenizer", files / "tokenizer.json"],
         "is a causal language model .*not a CSV"),
        (["train", arts] + _text(files) + ["--data", files / "texts.csv"], "not both"),
        (["train", arts] + _text(files) + ["--validation", files / "texts.csv"], "--validation-split"),
        (["train", arts] + _text(files) + ["--standardize"], "--standardize take a table"),
        (["train", mlp] + _text(files), "a text file trains a causal language model"),
        (["train", mlp, "--text-csv", files / "texts.csv", "--tokenizer", files / "tokenizer.json"],
         "takes no integer input for token ids"),
        (["train", mlp, "--data", files / "texts.csv", "--label", "label", "--tokenizer", files / "tokenizer.json"],
         "go with --text or --text-csv"),
        (["train", arts, "--text", files / "corpus.txt", "--tokenizer", files / "texts.csv"],
         "tokenizer.json is not valid JSON"),
    ]
    for argv, message in cases:
        code, _, err = _run(capsys, *argv)
        assert code != 0 and "Traceback" not in err, (argv, err)
        assert re.search(message, err), (argv, err)
