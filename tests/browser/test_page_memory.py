"""Memory in the tab (issue 21, item 6): building the digits MLP shows its memory estimate by part against what is
left of the limit; with the site's limit (config.json ``maxHeapBytes``, set here in the running worker's config)
below what the tab already holds, Start is refused before the first step, the error box naming the estimate and
the limit; with the limit back, training reports the WebAssembly heap's peak in the status line; and an uploaded
model whose artifact generation would not fit what is left is refused before generating, naming its size and the
limit, and generated once the limit is back."""
from __future__ import annotations

import pytest

import re

from browser_helpers import app_state, app_worker, build_digits, open_ready, train_epochs, wait_ms

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

MIB = r"[\d,]+ MiB"


def test_estimate_shown_run_over_the_limit_refused_before_a_step_peak_memory_reported_an_upload_refused(context,
                                                                                                       site_url):
    page, rec = open_ready(context, site_url)
    build_digits(page)
    setup = page.inner_text("#setup-status")
    assert re.search(r"Memory: training needs about %s at batch size \d+ \(parameters %s, gradients %s, optimizer "
                     r"state %s, activations %s\), within the %s left of the 2,048 MiB limit\." % ((MIB,) * 6), setup), setup
    memory = app_state(page, "a.model.memory")
    assert memory["parameters"] > 0 and memory["optimizer_state"] == 2 * memory["gradients"] > 0   # AdamW
    assert memory["limit"] == 2 << 30 and 0 < memory["left"] < memory["limit"]   # Pyodide already holds some

    worker = app_worker(page)
    worker.evaluate("() => { runtime.config.maxHeapBytes = 1 << 20; }")
    page.fill("#epochs", "1")
    page.click("#start")
    page.wait_for_function("""() => { const b = document.getElementById('error');
        return b && !b.hidden && b.textContent.includes('training this model needs'); }""", timeout=wait_ms(60_000))
    page.wait_for_function("() => !window.pytrainApp.training", timeout=wait_ms(30_000))
    error = page.inner_text("#error")
    assert re.search(r"at batch size \d+: parameters .*over pytrain's memory limit of 1048576 bytes \(1\.0 MiB less "
                     r"the \d+ bytes .* the heap already holds besides this model", error), error
    assert app_state(page, "a.step") == 0 and app_state(page, "a.lossPoints().length") == 0
    page.click("#error-close")

    worker.evaluate("() => { runtime.config.maxHeapBytes = 0; }")
    train_epochs(page, 1, 120_000, batch_size=64)
    peak = app_state(page, "a.peakMemory")
    assert memory["limit"] - memory["left"] < peak <= memory["limit"]
    assert re.search(r"Peak memory %s\." % MIB, page.inner_text("#train-status"))

    # "Your model": generating artifacts for an upload over what is left is refused before it starts
    from pytrain.generator import models
    blob = models.to_bytes(models.mlp(64, [256], 10, seed=0))
    page.click("button[data-tab=model]")
    page.set_input_files("#onnx-file", files=[{"name": "wide.onnx", "mimeType": "application/octet-stream",
                                               "buffer": blob}])
    page.wait_for_function("() => document.querySelectorAll('#onnx-params input').length > 0", timeout=wait_ms(30_000))
    worker.evaluate("() => { runtime.config.maxHeapBytes = 1 << 20; }")
    page.evaluate("window.pytrainApp.model.old = true")
    page.click("#onnx-generate")
    page.wait_for_function("""() => { const b = document.getElementById('error');
        return b && !b.hidden && b.textContent.includes('generating training artifacts'); }""", timeout=wait_ms(60_000))
    error = page.inner_text("#error")
    assert re.search(r"generating training artifacts for wide\.onnx \(0\.1 MiB\) needs about 0\.2 MiB more \(3\.1x its "
                     r"size\) \(\d+ bytes\), over pytrain's memory limit of 1048576 bytes", error), error
    assert app_state(page, "a.model.old")   # nothing was generated
    page.click("#error-close")
    worker.evaluate("() => { runtime.config.maxHeapBytes = 0; }")
    page.click("#onnx-generate")
    page.wait_for_function("() => window.pytrainApp.model && !window.pytrainApp.model.old && window.pytrainApp.model.ready",
                           timeout=wait_ms(60_000))
    assert not rec.console_errors, rec.console_errors
    print("\ndigits MLP in the tab: estimate %s, heap besides the model %.1f MiB, peak %.1f MiB"
          % (memory, (memory["limit"] - memory["left"]) / 2 ** 20, peak / 2 ** 20))
