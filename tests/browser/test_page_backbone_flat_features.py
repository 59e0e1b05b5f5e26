"""By example on a feature extractor whose features barely vary across the examples (as a randomly
initialised MobileNetV2 in eval mode): the setup line warns in plain words that the head would stay
at chance, and what to do, instead of training at chance with no hint."""
from __future__ import annotations

import pytest

import sys
from pathlib import Path

import numpy as np

from browser_helpers import LOAD_TIMEOUT_MS, open_ready, wait_ms
from test_tables_and_models import _png

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web"))
from test_feature_head_flat import _extractor  # noqa: E402


def test_flat_features_are_pointed_out_on_the_page(context, site_url):
    page, rec = open_ready(context, site_url)
    page.click("#tabbtn-examples")
    page.set_input_files("#ex-backbone", files=[{"name": "flat.onnx", "mimeType": "application/octet-stream",
                                                 "buffer": _extractor(1e-8)}])
    page.wait_for_function("() => window.pytrainApp.backbone && window.pytrainApp.backbone.info", timeout=wait_ms(60_000))
    for k in (1, 2):
        files = [{"name": "c%d_%d.png" % (k, i), "mimeType": "image/png",
                  "buffer": _png(np.full((16, 16), 60 * k + 20 * i, np.uint8))} for i in range(3)]
        page.set_input_files("#ex-classes fieldset:nth-of-type(%d) input[type=file]" % k, files=files)
        page.wait_for_function("(k) => window.pytrainApp.examples[k - 1].items.length === 3", arg=k,
                               timeout=wait_ms(30_000))
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone'",
                           timeout=LOAD_TIMEOUT_MS)
    status = page.locator("#setup-status")
    assert "flat.onnx gives almost the same features for every example" in status.inner_text()
    assert "export the model with its pretrained weights, in evaluation mode" in status.inner_text()
    assert "bad" in status.get_attribute("class")
    assert not rec.console_errors, rec.console_errors
