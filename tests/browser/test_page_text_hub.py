""""Your text" in the page on a model as the Hugging Face Hub has it: the tiny GPT-2 of tests/fixtures/hub, exported
by Optimum with the Hub's default task (text-generation-with-past), chosen with its config.json: the tab takes it
(no input refused), its first loss is transformers' on the same blocks, and the downloaded model keeps
``past_key_values.*`` and ``present.*``, so onnxruntime's greedy loop with the cache (as transformers.js generates)
gives the tokens it gives without the cache and the tab's own logits. The widget takes a Hub model's config.json
(``data.config``) for a past whose heads only the config says (its first loss transformers' too)."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, app_state, build_text_lora, open_app, train_epochs, wait_ready

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from hub_fixtures import CORPUS, greedy, hub, ort_session, specs  # noqa: E402

from pytrain.run.loop import epoch_batches  # noqa: E402
from pytrain.run.text import split  # noqa: E402
from pytrain.text.hub_inputs import plan_model  # noqa: E402


def test_a_with_past_hub_export_trains_in_the_tab_and_downloads_with_its_cache(context, site_url, tmp_path):
    h = hub("gpt2")
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    ctx, rec = context
    page = open_app(ctx, site_url, rec)
    wait_ready(page)
    build_text_lora(page, [str(h.path), str(h.folder / "config.json")], str(tmp_path / "corpus.txt"),
                    tokenizer=str(h.tokenizer))
    model = app_state(page, "a.model")
    assert model["text"]["inputs"] == [n for n, _, _ in specs(h.model)]

    train_epochs(page, 1, 300_000, batch_size=4, lr=0.01)
    first = app_state(page, "a.lossPoints()")[0][1]
    blocks = np.asarray(h.oracle["corpus_blocks"]["losses"])
    train, _ = split(blocks, "lm", 0.1, 0)   # the tab holds out 10% (text_source.use), seed 0
    want = blocks[train[epoch_batches(len(train), 0, 0, 4)[0]]].mean()
    np.testing.assert_allclose(first, want, rtol=1e-4)

    with page.expect_download() as info:
        page.click("#download-model")
    merged = tmp_path / "merged.onnx"
    info.value.save_as(str(merged))
    blob = merged.read_bytes()
    assert specs(blob) == specs(h.model)
    sess = ort_session(blob)
    assert [o.name for o in sess.get_outputs()] == [o.name for o in ort_session(h.model).get_outputs()]
    feed = plan_model(blob)
    prompt = h.oracle["greedy"]["prompt"]
    cached = greedy(sess, feed, prompt, 8, cached=True)
    assert cached == greedy(sess, feed, prompt, 8, cached=False)
    ids = np.asarray([prompt + cached[:-1]], dtype=np.int64)
    tab = page.evaluate("""async (ids) => {
        const r = await window.pytrainApp.client.call('textLogits', {ids});
        return {shape: r.shape, values: Array.from(new Float32Array(r.logits.slice().buffer))};
    }""", ids.tolist())
    tab_logits = np.asarray(tab["values"], dtype=np.float32).reshape(tab["shape"])
    np.testing.assert_allclose(sess.run(["logits"], feed.arrays(ids))[0], tab_logits, atol=1e-4, rtol=1e-4)
    assert list(tab_logits[0, len(prompt) - 1:].argmax(-1)) == cached
    assert not rec.console_errors, rec.console_errors


WIDGET_HOST = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import { createTrainer } from "/pytrain-widget.js";
(async () => {
  const trainer = createTrainer({ model: "/ort-test/model.onnx", data: { text: "/ort-test/corpus.txt",
                                  tokenizer: "/ort-test/tokenizer.json", config: "/ort-test/config.json", blockSize: 16 },
                                  lora: { rank: 4, alpha: 8, targets: ["q_proj", "v_proj"] }, epochs: 1, batchSize: 4,
                                  learningRate: 0.01 });
  const losses = [];
  trainer.on("progress", (p) => losses.push(...p.losses));
  await trainer.ready;
  await trainer.train();
  const model = await trainer.exportModel();
  return { losses, model: Array.from(model) };
})().catch((e) => ({ error: e.message || String(e) })).then((r) => { window.__text = r; });
</script>
"""


def test_the_widget_takes_a_hub_models_config_json_and_exports_it_with_its_cache(context, site_url):
    from browser_helpers import serve_files, wait_ms
    from hub_fixtures import open_past_heads

    h = hub("qwen2")
    blob = open_past_heads(h.model)   # only config.json says the past's heads
    ctx, rec = context
    serve_files(ctx, {"/ort-test/host.html": WIDGET_HOST.encode(), "/ort-test/model.onnx": blob,
                      "/ort-test/tokenizer.json": h.tokenizer.read_bytes(), "/ort-test/corpus.txt": CORPUS.encode(),
                      "/ort-test/config.json": (h.folder / "config.json").read_bytes()})
    page = open_app(ctx, site_url, rec, "ort-test/host.html")
    page.wait_for_function("() => window.__text !== undefined", timeout=LOAD_TIMEOUT_MS + wait_ms(180_000))
    res = page.evaluate("() => window.__text")
    assert "error" not in res, res
    blocks = np.asarray(h.oracle["corpus_blocks"]["losses"])
    from pytrain.webapp.text_source import TextUse

    # the widget sends no validation fraction: Python's default for text
    train, _ = split(blocks, "lm", TextUse._field_defaults["val_fraction"], 0)
    np.testing.assert_allclose(res["losses"][0], blocks[train[epoch_batches(len(train), 0, 0, 4)[0]]].mean(),
                               rtol=1e-4)
    merged = bytes(bytearray(res["model"]))
    sess = ort_session(merged)
    assert [o.name for o in sess.get_outputs()] == [o.name for o in ort_session(h.model).get_outputs()]
    feed = plan_model(merged, h.config)
    prompt = h.oracle["greedy"]["prompt"]
    assert greedy(sess, feed, prompt, 8, cached=True) == greedy(sess, feed, prompt, 8, cached=False)
    assert rec.foreign(site_url) == [] and not rec.console_errors, rec.console_errors
