"""The page's default digits run starts on the digits' first part (build.py's data/mnist-10k-first.bin) and
the whole file joins before a batch needs more: its losses are CPython's on the whole file, step by step."""
from __future__ import annotations

import json

import numpy as np

import build
from browser_helpers import app_state, build_digits, open_ready, stop_training, wait_ms

STEPS = 12   # past the part's 4 batches of 64: the whole file joined mid-run


def test_default_run_on_the_first_part_matches_cpython_on_the_whole_file(context, site_url):
    from pytrain.webapp import Session

    page, rec = open_ready(context, site_url)
    build_digits(page, "mlp", "8000")
    assert app_state(page, "a.data.loading") is True            # the model was built on the part alone
    page.fill("#epochs", "1")
    page.click("#start")
    page.wait_for_function("() => window.pytrainApp.lossPoints().length >= %d" % STEPS, timeout=wait_ms(120_000))
    stop_training(page)
    got = [loss for _, loss in app_state(page, "a.lossPoints()")[:STEPS]]
    urls = [u.split("?")[0].rsplit("/", 2)[-2:] for u in rec.urls]
    first, whole = ["data", "mnist-10k-first.bin"], ["data", "mnist-10k.bin"]
    assert first in urls and whole in urls and urls.index(first) < urls.index(whole)

    config = json.loads((build.SITE / "config.json").read_text())
    s = Session()
    s.use_digits((build.SITE / config["mnist"]["file"]).read_bytes(), 8000, 1000)
    s.build_digits("mlp", "AdamW", {k: (build.SITE / v).read_bytes()
                                    for k, v in config["artifacts"]["digits-mlp"].items()})
    s.configure(batch_size=64, lr=0.002)                          # the page's defaults (index.html)
    want = s.train_for(budget_ms=1e9, max_steps=STEPS)["losses"]
    # (the tab's products run on the wasm SIMD GEMM, CPython's on OpenBLAS: another summation order)
    np.testing.assert_allclose(got, want, rtol=2e-4)
