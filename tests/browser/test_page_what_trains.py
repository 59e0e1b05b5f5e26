"""Choosing what trains in "Your model": Everything, Untick all, Head only and Last N layers (passed
to the generator as trainable_ops, the layers it counts), with the count of trainable values shown live;
what is no weight (scalar constants, integers) is listed as not trainable, with why, never offered."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, open_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

onnx = pytest.importorskip("onnx")


def _three_layers() -> bytes:
    """Gemm -> Clip(min, max: scalar constants) -> Gemm -> Gemm: 32+8, 64+8, 24+3 weight values."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = {"W1": rng.standard_normal((4, 8)), "B1": np.zeros(8), "W2": rng.standard_normal((8, 8)), "B2": np.zeros(8),
             "W3": rng.standard_normal((8, 3)), "B3": np.zeros(3), "min_val_cast": np.array(0.0), "max_val_cast": np.array(6.0)}
    nodes = [helper.make_node("Gemm", ["input", "W1", "B1"], ["h1"]),
             helper.make_node("Clip", ["h1", "min_val_cast", "max_val_cast"], ["r1"]),
             helper.make_node("Gemm", ["r1", "W2", "B2"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("Gemm", ["r2", "W3", "B3"], ["output"])]
    g = helper.make_graph(nodes, "three", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _ticked(page):
    return sorted(page.eval_on_selector_all("#onnx-params input:checked", "els => els.map((e) => e.value)"))


def test_presets_choose_what_trains_and_the_count_follows(context, site_url):
    page, rec = open_ready(context, site_url)
    page.click("button[data-tab=model]")
    page.set_input_files("#onnx-file", files=[{"name": "three.onnx", "mimeType": "application/octet-stream",
                                               "buffer": _three_layers()}])
    page.wait_for_function("() => document.querySelectorAll('#onnx-params input').length === 6", timeout=wait_ms(30_000))
    # the scalar constants are no weights: not offered, listed with why
    assert "min_val_cast" not in page.text_content("#onnx-params")
    assert "min_val_cast []: a scalar constant" in page.text_content("#onnx-fixed")
    assert page.text_content("#onnx-count").startswith("139 of 139 weight values train")

    page.click("#onnx-head")
    assert _ticked(page) == ["B3", "W3"] and page.text_content("#onnx-count").startswith("27 of 139")
    page.fill("#onnx-last-n", "2")
    page.click("#onnx-last")
    assert _ticked(page) == ["B2", "B3", "W2", "W3"] and page.text_content("#onnx-count").startswith("99 of 139")
    page.click("#onnx-none")
    assert _ticked(page) == [] and page.text_content("#onnx-count").startswith("0 of 139")
    page.click("#onnx-all")
    assert len(_ticked(page)) == 6
    page.uncheck("#onnx-params input[value=W1]")            # by hand: the count follows too
    assert page.text_content("#onnx-count").startswith("107 of 139")

    page.click("#onnx-head")
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'upload'",
                           timeout=LOAD_TIMEOUT_MS)
    assert page.evaluate("window.pytrainApp.model.params") == 27     # what the page counted is what trains

    # "Last N layers" goes to the generator as trainable_ops itself (not as the boxes it ticks), count shown live
    page.fill("#onnx-last-n", "2")
    page.click("#onnx-last")
    assert page.text_content("#onnx-count") == "99 of 139 weight values train (4 of 6 weights ticked: the last 2 layers)"
    page.evaluate("window.pytrainApp.model.old = true")
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && !window.pytrainApp.model.old && window.pytrainApp.model.ready",
                           timeout=LOAD_TIMEOUT_MS)
    model = page.evaluate("window.pytrainApp.model")
    assert model["trainable_ops"] == 2 and model["params"] == 99
    page.uncheck("#onnx-params input[value=W2]")            # by hand: ticks again, no longer "the last 2 layers"
    assert page.text_content("#onnx-count") == "35 of 139 weight values train (3 of 6 weights ticked)."
    assert not rec.console_errors, rec.console_errors
