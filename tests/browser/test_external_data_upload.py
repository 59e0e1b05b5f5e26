"""The page's "Your model" upload takes the ``.onnx.data`` file chosen with the ``.onnx`` (ONNX
external data, as torch's default exporter writes it), and ticks what trains by default."""
from __future__ import annotations

import numpy as np
import pytest
from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, open_app, wait_ready

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

onnx = pytest.importorskip("onnx")


@pytest.fixture()
def page_ctx(context, site_url):
    ctx, rec = context
    return open_app(ctx, site_url, rec), rec


def test_model_with_its_data_file(page_ctx, tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    page, rec = page_ctx
    rng = np.random.default_rng(0)
    inits = {"W1": rng.standard_normal((4, 8)).astype(np.float32), "B1": np.zeros(8, np.float32),
             "W2": rng.standard_normal((8, 3)).astype(np.float32), "val_5": np.array([0.5], np.float32)}
    nodes = [helper.make_node("Gemm", ["input", "W1", "B1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["m"]), helper.make_node("Mul", ["m", "val_5"], ["output"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)

    wait_ready(page)
    page.click("button[data-tab=model]")
    # the .onnx alone: the page says which file to add, in words for people (no Python arguments)
    page.set_input_files("#onnx-file", str(path))
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(60_000))
    msg = page.inner_text("#error-text")
    assert "also choose m.onnx.data in the same dialog" in msg and "external_data=" not in msg, msg
    page.set_input_files("#onnx-file", [str(path), str(tmp_path / "m.onnx.data")])
    page.wait_for_function("() => document.querySelectorAll('#onnx-params input').length === 3", timeout=wait_ms(60_000))
    ticked = page.eval_on_selector_all("#onnx-params input", "els => els.map((e) => [e.value, e.checked])")
    assert dict(ticked) == {"W1": True, "B1": True, "W2": True}
    # the folded constant is no weight: listed as not trainable, with why
    assert "val_5 [1]: constant folded by the exporter" in page.text_content("#onnx-fixed")
    page.select_option("#onnx-batchnorm", "eval")
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'upload'",
                           timeout=LOAD_TIMEOUT_MS)
    assert page.locator("#error").is_hidden()
    assert page.evaluate("() => window.pytrainApp.model.params") == 4 * 8 + 8 + 8 * 3
    assert page.evaluate("() => window.pytrainApp.model.batchnorm") == "eval"  # the page's choice reached Python
