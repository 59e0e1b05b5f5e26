"""A model with ops pytrain cannot run is refused when it is chosen, naming those ops only (not
the list of every op pytrain runs), in a short error whose top is in view; nothing is offered for it."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import wait_ms, open_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

onnx = pytest.importorskip("onnx")


def _nms_model() -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    consts = {"W": np.eye(4, dtype=np.float32), "B": np.zeros(4, np.float32), "shp": np.array([1, -1, 4]),
              "mo": np.array([10]), "iou": np.array([0.5], np.float32), "st": np.array([0.1], np.float32)}
    nodes = [helper.make_node("Gemm", ["input", "W", "B"], ["b0"]), helper.make_node("Reshape", ["b0", "shp"], ["boxes"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "iou", "st"], ["output"])]
    g = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4]),
                                         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, "N"])],
                          [helper.make_tensor_value_info("output", TensorProto.INT64, ["K", 3])],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _unique_model() -> bytes:
    """An op pytrain has no kernel for (Loop, which this used, now runs: pytrain/ops/control)."""
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Unique", ["input"], ["output"], sorted=1)], "unique",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["K"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _choose(page, name, blob, count):
    page.set_input_files("#onnx-file", files=[{"name": name, "mimeType": "application/octet-stream", "buffer": blob}])
    page.wait_for_function("(n) => window.pytrainApp.errors.length === n", arg=count, timeout=wait_ms(30_000))
    return page.inner_text("#error-text")


def test_unsupported_ops_are_named_when_the_model_is_chosen(context, site_url):
    page, rec = open_ready(context, site_url)
    page.click("button[data-tab=model]")
    msg = _choose(page, "nms.onnx", _nms_model(), 1)
    assert "NonMaxSuppression" in msg and "nms.onnx" in msg, msg
    assert "Abs" not in msg and "Tick" not in msg and len(msg) < 300, msg   # not the list of every op
    # nothing is offered for it: no weights, no presets, Generate disabled
    assert page.locator("#onnx-generate").is_disabled()
    assert page.evaluate("document.querySelectorAll('#onnx-params input').length") == 0
    assert page.locator("#onnx-presets").is_hidden() and page.text_content("#onnx-info") == ""
    top = page.evaluate("document.getElementById('error').getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"] / 2
    page.click("#error-close")

    msg = _choose(page, "unique.onnx", _unique_model(), 2)
    assert "Unique" in msg and "Tick" not in msg and "Abs" not in msg, msg
    assert page.locator("#onnx-generate").is_disabled()
    assert not rec.console_errors, rec.console_errors
