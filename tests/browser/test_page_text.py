""""Your text" in the page, one page load: a tiny GPT-2 (2 layers, n_embd 32, a byte-level BPE trained with the
``tokenizers`` package inside the test, exported by ``pytrain.torch_export``) uploaded with its tokenizer.json and
a text file, LoRA-fine-tuned (rank 8 on GPT-2's c_attn and lm_head, named in the page) with the page's own controls: the
memory estimate is shown, the loss falls, samples of the model's continuation appear; the downloaded merged model
run in onnxruntime gives the tab's own logits (1e-4), its weights differ from the upload only by the downloaded
adapters (W + alpha/rank * A^T B^T on the targets, every other weight bit for bit); axe finds no violation; an
upload the tab cannot use (a tokenizer.json that does not parse) shows in the error box."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, app_state, open_app, train_epochs, wait_ms, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from onnx import numpy_helper  # noqa: E402

from pytrain.engine.lora import read_adapters  # noqa: E402
from test_page_a11y import axe_violations  # noqa: E402
from tiny_lm import LENGTH, TEXT  # noqa: E402

RANK, ALPHA = 8, 16.0


def _weights(blob: bytes) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(blob).graph.initializer}


def test_a_tiny_gpt2_fine_tunes_with_lora_in_the_tab_and_downloads_as_the_tab_predicts(context, site_url, tmp_path, lm):
    (tmp_path / "tiny-gpt2.onnx").write_bytes(lm.onnx)
    (tmp_path / "tokenizer.json").write_text(lm.tokenizer_json)
    (tmp_path / "corpus.txt").write_text(TEXT)
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    page.click("button[data-tab=text]")

    # a tokenizer.json that does not parse: the error box says so, nothing is built
    page.set_input_files("#text-model", str(tmp_path / "tiny-gpt2.onnx"))
    page.set_input_files("#text-tokenizer", files=[{"name": "tokenizer.json", "mimeType": "application/json",
                                                    "buffer": b"{not json"}])
    page.set_input_files("#text-data", str(tmp_path / "corpus.txt"))
    page.click("#text-build")
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    assert "tokenizer.json is not valid JSON" in page.inner_text("#error-text")
    assert not app_state(page, "a.model && a.model.ready")

    page.set_input_files("#text-tokenizer", str(tmp_path / "tokenizer.json"))
    page.fill("#text-lora-targets", "c_attn, lm_head")   # the attention's input projections and the head
    page.click("#text-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'text'",
                           timeout=LOAD_TIMEOUT_MS)
    model = app_state(page, "a.model")
    targets = model["lora"]["weights"]
    assert model["loss"] == "CausalLMLoss" and model["lora"]["rank"] == RANK
    assert targets == ["hf.transformer.h.0.attn.c_attn.weight", "hf.transformer.h.1.attn.c_attn.weight",
                       "hf.lm_head.weight"]
    assert all(t in page.inner_text("#text-info") for t in targets)
    assert "Memory: training needs about" in page.inner_text("#text-memory")
    assert "within the" in page.inner_text("#text-memory")

    epochs = train_epochs(page, 5, 300_000, batch_size=4, lr=0.01)
    losses = [p[1] for p in app_state(page, "a.lossPoints()")]
    assert len(losses) >= 8 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 1.0, losses
    assert epochs[-1]["loss"] < epochs[0]["loss"] and epochs[-1]["metricName"] == "perplexity"
    page.wait_for_function("() => window.pytrainApp.textSamples.length >= 1", timeout=wait_ms(60_000))
    sample = app_state(page, "a.textSamples[a.textSamples.length - 1]")
    assert sample["kind"] == "lm" and sample["continuation"] and len(sample["ids"]) == 20
    assert sample["continuation"] in page.inner_text("#text-samples")

    ids = np.random.default_rng(0).integers(0, lm.vocab_size, (2, LENGTH)).astype(np.int64)
    tab = page.evaluate("""async (ids) => {
        const r = await window.pytrainApp.client.call('textLogits', {ids});
        return {shape: r.shape, values: Array.from(new Float32Array(r.logits.slice().buffer))};
    }""", ids.tolist())
    tab_logits = np.asarray(tab["values"], dtype=np.float32).reshape(tab["shape"])
    with page.expect_download() as info:
        page.click("#download-model")
    merged = (tmp_path / "merged.onnx")
    info.value.save_as(str(merged))
    got = ort.InferenceSession(str(merged), providers=["CPUExecutionProvider"]).run(None, {"input_ids": ids})[0]
    np.testing.assert_allclose(got, tab_logits, atol=1e-4, rtol=1e-4)

    with page.expect_download() as info:
        page.click("#download-adapters")
    adapters = read_adapters(info.value.path().read_bytes())
    before, after = _weights(lm.onnx), _weights(merged.read_bytes())
    assert set(after) == set(before)
    for name, w in before.items():
        if name not in targets:
            assert np.array_equal(after[name], w), name
            continue
        stem = name[:-len(".weight")]
        a, b = adapters[stem + ".lora_A"], adapters[stem + ".lora_B"]
        assert np.abs(b).max() > 0, "the adapter of %s did not train" % name
        # GPT-2's Conv1D stores W as (in, out): the merge adds alpha/rank * A^T B^T; the head (torch_export's
        # x @ Transpose(W)) as (out, in): alpha/rank * B A
        delta = b @ a if w.shape == (b.shape[0], a.shape[1]) else a.T @ b.T
        np.testing.assert_allclose(after[name], w + (ALPHA / RANK) * delta, atol=1e-6)

    assert axe_violations(page) == []
    assert len(app_state(page, "a.errors")) == 1   # the tokenizer.json refused above, nothing else
    assert rec.foreign(site_url) == []
    assert not rec.console_errors, rec.console_errors
