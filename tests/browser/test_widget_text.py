"""The widget's "Your text" API on a host page of the site's origin: createTrainer({model, data: {text, tokenizer},
lora}) LoRA-fine-tunes a tiny GPT-2 on a text file (the loss falls), and its samples(), logits(), exportModel()
(merged) and exportAdapters() answer; the merged model run in onnxruntime gives the widget's logits (1e-4)."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, open_app, serve_files, wait_ms

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from pytrain.engine.lora import read_adapters  # noqa: E402
from tiny_lm import TEXT  # noqa: E402

HOST = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import { createTrainer } from "/pytrain-widget.js";
(async () => {
  const trainer = createTrainer({ model: "/ort-test/lm.onnx", data: { text: "/ort-test/corpus.txt", tokenizer: "/ort-test/tokenizer.json" },
                                  lora: { rank: 8, alpha: 16, targets: ["c_attn", "lm_head"] }, epochs: 3, batchSize: 4, learningRate: 0.01 });
  const losses = [];
  trainer.on("progress", (p) => losses.push(...p.losses));
  await trainer.ready;
  const done = await trainer.train();
  const sample = await trainer.samples({ prompt: "the cat", newTokens: 8 });
  const ids = [[5, 17, 80, 3, 9, 11, 40, 2, 7, 7, 1, 100, 200, 3, 4, 5]];
  const { logits, shape } = await trainer.logits(ids);
  const model = await trainer.exportModel();
  const adapters = await trainer.exportAdapters("onnx");
  return { done, losses, sample, ids, logits: Array.from(logits), shape, model: Array.from(model),
           adapters: Array.from(adapters), memory: trainer.memory, lora: trainer.model.lora };
})().catch((e) => ({ error: e.message || String(e) })).then((r) => { window.__text = r; });
</script>
"""


def test_the_widget_fine_tunes_a_language_model_on_text_and_exports_it_merged(context, site_url, lm):
    ctx, rec = context
    serve_files(ctx, {"/ort-test/host.html": HOST.encode(), "/ort-test/lm.onnx": lm.onnx,
                      "/ort-test/tokenizer.json": lm.tokenizer_json.encode(), "/ort-test/corpus.txt": TEXT.encode()})
    page = open_app(ctx, site_url, rec, "ort-test/host.html")
    page.wait_for_function("() => window.__text !== undefined", timeout=LOAD_TIMEOUT_MS + wait_ms(180_000))
    res = page.evaluate("() => window.__text")
    assert "error" not in res, res
    assert res["done"]["reason"] == "finished" and res["done"]["epoch"] == 3
    assert np.mean(res["losses"][-3:]) < np.mean(res["losses"][:3]) - 0.5, res["losses"]
    assert res["memory"]["fits"] and res["lora"]["weights"][-1] == "hf.lm_head.weight"
    assert res["sample"]["kind"] == "lm" and len(res["sample"]["ids"]) == 8
    merged = bytes(bytearray(res["model"]))
    got = ort.InferenceSession(merged, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": np.asarray(res["ids"], dtype=np.int64)})[0]
    np.testing.assert_allclose(got, np.asarray(res["logits"], np.float32).reshape(res["shape"]), atol=1e-4, rtol=1e-4)
    assert sorted(read_adapters(bytes(bytearray(res["adapters"])))) == sorted(
        "hf.%s.lora_%s" % (w, ab) for w in ("transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn", "lm_head")
        for ab in "AB")
    assert rec.foreign(site_url) == [] and not rec.console_errors, rec.console_errors
