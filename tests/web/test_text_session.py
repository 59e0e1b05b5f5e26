"""The page's "Your text" room (Session.text, pytrain.webapp.text_source) natively: a tiny GPT-2 and a text file
train with LoRA through the session's own loop (loss falls), its samples are the greedy loop over the exported
model in onnxruntime, its logits are onnxruntime's on the export, the adapters download alone, the saved
run comes back and trains on as the original (a federation is refused); a tiny BERT
classifier trains on a CSV of texts and labels with its attention mask and predicts held-out texts; what the tab
cannot use is refused naming why (ids beyond the vocabulary, a text file for a classifier, a label count the
output does not have, an unparsable tokenizer.json)."""
from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from pytrain.errors import DataError  # noqa: E402
from pytrain.engine.lora import read_adapters  # noqa: E402
from pytrain.text.generate import continue_ids  # noqa: E402
from pytrain.webapp import Session, WebappError  # noqa: E402
from tiny_lm import CSV, LENGTH, TEXT, tiny_bert_classifier, tiny_gpt2  # noqa: E402


def _session(lm, **kw):
    s = Session()
    s.configure(batch_size=4, lr=0.01)
    res = s.text("use", model=lm.onnx, tokenizer=lm.tokenizer_json, **kw)
    return s, res


def test_a_causal_lm_trains_on_a_text_file_and_samples_greedily_from_its_export(lm):
    s, res = _session(lm, text=TEXT, lora={"rank": 4, "alpha": 8, "targets": ["c_attn", "lm_head"]})
    assert res["model"]["lora"]["weights"] == ["hf.transformer.h.0.attn.c_attn.weight",
                                              "hf.transformer.h.1.attn.c_attn.weight", "hf.lm_head.weight"]
    assert res["memory"]["fits"] and res["memory"]["total"] > 0 and "activations" in res["memory"]["describe"]
    assert res["data"]["task"] == "lm" and res["data"]["sample_shape"] == [LENGTH]
    losses = []
    while s.run.at.epoch < 3:
        losses += s.train_for(budget_ms=10000)["losses"]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.5, losses
    assert s.evaluate()["metric_name"] == "perplexity"

    export = ort.InferenceSession(s.export(), providers=["CPUExecutionProvider"])
    run = lambda ids: export.run(None, {"input_ids": ids})[0]   # noqa: E731
    sample = s.text("samples", prompt="the cat", new_tokens=12)
    from pytrain.text import Tokenizer
    tok = Tokenizer.from_json(lm.tokenizer_json)
    want = continue_ids(run, tok.encode("the cat", add_special_tokens=False), 12, length=LENGTH)
    assert sample["ids"] == want and sample["continuation"] == tok.decode(want)

    ids = np.random.default_rng(0).integers(0, lm.vocab_size, (3, LENGTH))
    got = s.text("logits", ids=ids.tolist())
    tab = np.frombuffer(got["logits"], np.float32).reshape(got["shape"])
    np.testing.assert_allclose(tab, run(ids.astype(np.int64)), atol=1e-5)
    adapters = read_adapters(s.text("adapters"))
    assert sorted(adapters) == sorted(n for n in s.run.state.parameters if ".lora_" in n)

    # the saved run (the page's IndexedDB snapshot) comes back after a reload and trains on as the original
    snap = s.snapshot()
    again = Session()
    again.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    assert again.digest() == s.digest() and again.text("samples", prompt="the cat", new_tokens=12)["ids"] == want
    assert again.train_for(budget_ms=1e9, max_steps=2)["losses"] == s.train_for(budget_ms=1e9, max_steps=2)["losses"]
    with pytest.raises(WebappError, match="cannot join a federation"):
        s.federation("start", url="http://127.0.0.1:1/", public_key="")


def test_a_text_classifier_trains_on_a_csv_with_its_attention_mask(lm):
    model = tiny_bert_classifier(lm.vocab_size, classes=3, length=LENGTH)
    s = Session()
    s.configure(batch_size=8, lr=0.03)   # adapters on query and value alone (peft's default) move slower
    res = s.text("use", model=model, tokenizer=lm.tokenizer_json, csv=CSV, val_fraction=0.25,
                 lora={"rank": 4, "alpha": 8})
    assert res["model"]["loss"] == "CrossEntropyLoss" and res["data"]["classes"] == ["bird", "cat", "dog"]
    assert res["model"]["sample_shape"] == res["data"]["sample_shape"] == [2, LENGTH]   # ids and mask: the page's Start
    assert res["model"]["lora"]["weights"] == ["hf.bert.encoder.layer.0.attention.self.%s.weight" % w
                                              for w in ("query", "value")]   # peft's default for BERT
    trains = sorted(n for n, p in s.run.state.parameters.items() if p.requires_grad)
    assert [n for n in trains if ".lora_" not in n] == ["hf.classifier.bias", "hf.classifier.weight"]
    losses = []
    while s.run.at.epoch < 12:
        losses += s.train_for(budget_ms=10000)["losses"]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.2, losses
    ev = s.evaluate()
    assert ev["metric_name"] == "accuracy" and 0.0 <= ev["metric"] <= 1.0
    pred = s.text("samples", count=3)["predictions"]
    assert len(pred) == 3 and all(p["predicted"] in ("bird", "cat", "dog") and p["text"] for p in pred)
    assert s.insights()["task"] == "classification"


def test_refuses_what_the_tab_cannot_train_naming_why(lm):
    small = tiny_gpt2(length=LENGTH)._replace(onnx=tiny_bert_classifier(40, classes=3, length=LENGTH))
    with pytest.raises(DataError, match=r"the model's vocabulary has 40 ids"):
        _session(small, csv=CSV)
    with pytest.raises(DataError, match="a text file trains a causal language model"):
        _session(small, text=TEXT)
    two = small._replace(onnx=tiny_bert_classifier(lm.vocab_size, classes=2, length=LENGTH))
    with pytest.raises(DataError, match="the CSV has 3 labels"):
        _session(two, csv=CSV)
    with pytest.raises(DataError, match="tokenizer.json is not valid JSON"):
        _session(lm._replace(tokenizer_json="{oops"), text=TEXT)
    with pytest.raises(DataError, match="fewer than one block"):
        _session(lm, text="the cat")


def test_your_model_turns_lora_on_with_a_rank_its_targets_every_weight_without_attention():
    from pytrain.generator import models

    s = Session()
    model = s.generate(models.to_bytes(models.mlp(6, [8], 3, seed=0)), lora={"rank": 2})
    assert model["lora"]["weights"] == ["fc1.weight", "fc2.weight"] and model["lora"]["alpha"] == 2.0
    assert sorted(n for n, p in s.run.state.parameters.items() if p.requires_grad) == [
        "fc1.lora_A", "fc1.lora_B", "fc2.lora_A", "fc2.lora_B"]
    assert s.generate(models.to_bytes(models.mlp(6, [8], 3, seed=0)), lora=None)["lora"] is None


def test_a_text_runs_file_goes_back_into_the_page_with_its_tokenizer_and_settings(lm):
    """The run file (the page's .zip) of a "Your text" run: its tokenizer.json and text go with it, and a new tab
    takes it back at its step, with its batch size, learning rate and split, and trains on with the same losses."""
    for kw in ({"text": TEXT, "lora": {"rank": 4, "alpha": 8, "targets": ["c_attn"]}},
               {"csv": CSV, "val_fraction": 0.25, "lora": {"rank": 4, "alpha": 8}}):
        model = lm.onnx if "text" in kw else tiny_bert_classifier(lm.vocab_size, classes=3, length=LENGTH)
        s = Session()
        s.configure(batch_size=3, lr=0.02)
        s.text("use", model=model, tokenizer=lm.tokenizer_json, **kw)
        s.train_for(budget_ms=1e9, max_steps=2)
        blob = s.run_file(epochs=4)
        again = Session()
        res = again.use_artifact_files({"run.zip": blob})
        assert "the run's tokenizer" in res["files"].values() and res["step"] == 2 and res["epochs"] == 4
        assert (again.run.batch_size, again.run.lr) == (3, 0.02) and again.digest() == s.digest()
        assert res["data"]["task"] == ("lm" if "text" in kw else "classification")
        for part in ("train_x", "train_y", "val_x", "val_y"):
            np.testing.assert_array_equal(again.source.data[part], s.source.data[part])
        assert again.train_for(budget_ms=1e9, max_steps=3)["losses"] == s.train_for(budget_ms=1e9, max_steps=3)["losses"]
        assert again.evaluate()["loss"] == s.evaluate()["loss"]
        if "csv" in kw:
            assert again.text("samples", count=2)["predictions"] == s.text("samples", count=2)["predictions"]
