"""Stale state in "By example": a run that comes back, resumed from this
browser after a reload or taken back from its run file in another browser (none of its storage), shows its classes
(names) and examples (thumbnails, counts) in the gallery, since the model trains on them; the resumed run
predicts as before the reload and continues exactly as the run that never reloaded (a backbone run
carries its features for that); deleting an example and building again works on the restored gallery
as in the session that recorded it."""
from __future__ import annotations

import numpy as np
import pytest

from browser_helpers import (wait_ms, LOAD_TIMEOUT_MS, Recorder, app_state, lent_or_fresh_context, open_app,
                             train_epochs, wait_ready)
from test_page_a11y import axe_violations, shoot
from test_page_by_example import _hold_until, camera_page  # noqa: F401  (the fake-camera fixture)
from test_page_by_example_backbone import PREDICT, SIDE, _backbone
from test_tables_and_models import _png

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

#: every example the run trains on (in the order given), through the model: features from the cache
PREDICT_EXAMPLES = """async () => {
    const c = window.pytrainApp.client, ex = await c.call('examples');
    const x = new Float32Array(ex.x.buffer, ex.x.byteOffset, ex.x.byteLength / 4);
    return (await c.call('predict', {x, shape: ex.shape})).outputs;
}"""
DIGEST = "() => window.pytrainApp.client.call('digest')"


def _record_examples(page, n_files=8):
    """Class 1 "Camera" from the fake camera (hold to record), class 2 "Grey" from picture files."""
    for k, name in ((1, "Camera"), (2, "Grey")):
        sel = "#ex-classes fieldset:nth-of-type(%d) legend input" % k
        page.fill(sel, name)
        page.dispatch_event(sel, "change")
    page.locator("#ex-classes fieldset:nth-of-type(1) .ex-record").scroll_into_view_if_needed()
    _hold_until(page, "#ex-classes fieldset:nth-of-type(1) .ex-record", "window.pytrainApp.examples[0].items.length >= 5")
    files = [{"name": "g%d.png" % i, "mimeType": "image/png",
              "buffer": _png(np.full((40, 40), 40 + 12 * i, np.uint8))} for i in range(n_files)]
    page.set_input_files("#ex-classes fieldset:nth-of-type(2) input[type=file]", files=files)
    page.wait_for_function("() => window.pytrainApp.examples[1].items.length === %d" % n_files, timeout=wait_ms(30_000))
    return _gallery(page)


def _gallery(page):
    """What the gallery shows: [(class name, count text, thumbnails)] and its model-side counts."""
    shown = page.evaluate("""() => Array.from(document.querySelectorAll('#ex-classes fieldset')).map((fs) =>
        [fs.querySelector('legend input').value, fs.querySelector('.ex-count').textContent,
         fs.querySelectorAll('.ex-item canvas').length])""")
    counts = app_state(page, "a.examples.map((c) => [c.name, c.items.length])")
    assert [s[0] for s in shown] == [c[0] for c in counts]
    for (name, text, thumbs), (_, n) in zip(shown, counts):
        assert text == "%d example%s" % (n, "" if n == 1 else "s"), (name, text, n)
        assert thumbs == min(12, n), (name, thumbs, n)
    return counts


def _thumbs(page, k):
    """The pixels of the last thumbnail of class ``k`` (1-based), as drawn."""
    return page.evaluate("""(k) => {
        const cs = document.querySelectorAll(`#ex-classes fieldset:nth-of-type(${k}) .ex-item canvas`);
        const c = cs[cs.length - 1];
        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data);
    }""", k)


def _continue_one_epoch(page, epochs, via_start):
    """Train to ``epochs`` epochs; returns every step's loss. ``via_start``: with the page's Start
    button (saved as usual); else straight through the worker without saving, so the run saved in
    this browser stays the one before."""
    page.evaluate("""() => { window.__losses = []; window.__done = false;
        const c = window.pytrainApp.client;
        c.on('progress', (p) => window.__losses.push(...p.losses));
        c.on('done', () => { window.__done = true; }); }""")
    if via_start:
        page.fill("#epochs", str(epochs))
        page.click("#start")
    else:
        page.evaluate("(e) => window.pytrainApp.client.call('train', {epochs: e, persist: false, "
                      "batchSize: parseInt(document.getElementById('batch-size').value, 10), "
                      "learningRate: parseFloat(document.getElementById('lr').value)})", epochs)
    page.wait_for_function("() => window.__done && !window.pytrainApp.training", timeout=wait_ms(180_000))
    assert app_state(page, "a.epoch") == epochs
    return page.evaluate("() => window.__losses")


def _resume_after_reload(page, what):
    page.reload()
    page.locator("#resume-banner").wait_for(state="visible", timeout=wait_ms(30_000))
    assert page.inner_text("#resume-text").startswith("A saved %s run is in this browser" % what)
    wait_ready(page)
    page.click("#resume-btn")
    page.wait_for_function("() => window.pytrainApp.resumed !== null && !window.pytrainApp.training", timeout=wait_ms(60_000))
    # "What it learned" shows the resumed run's validation results, not "after a run, this shows..."
    page.wait_for_function("() => window.pytrainApp.learned", timeout=wait_ms(60_000))
    assert page.locator("#learned-body").is_visible() and not page.locator("#learned-none").is_visible()
    assert np.array(app_state(page, "a.learned.confusion")).sum() == app_state(page, "a.data.val")
    page.click("#tabbtn-examples")
    return app_state(page, "a.resumed")


def _batch_backbone(tmp_path):
    """bb.onnx: each picture's mean colour plus a millionth of the batch's mean: its features' last bits
    depend on the batch it runs in (as a real backbone's can), so features computed again after a
    reload, in the training batches, would not be the ones the head trained on."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("GlobalAveragePool", ["img"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["own"], axis=1),
             helper.make_node("ReduceMean", ["own"], ["batch"], axes=[0], keepdims=1),
             helper.make_node("Mul", ["batch", "eps"], ["shared"]),
             helper.make_node("Add", ["own", "shared"], ["out"])]
    graph = helper.make_graph(nodes, "batch_mixing",
                              [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 3, SIDE, SIDE])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return [{"name": "bb.onnx", "mimeType": "application/octet-stream", "buffer": model.SerializeToString()}]


@pytest.mark.parametrize("backbone", ["torch", "batch"])
def test_backbone_run_resumed_and_taken_back_shows_its_gallery_and_continues_exactly(
        camera_page, site_url, tmp_path, backbone, request, browser):  # noqa: F811
    page, rec = camera_page
    page.set_input_files("#ex-backbone", files=(_backbone if backbone == "torch" else _batch_backbone)(tmp_path))
    page.wait_for_function("() => window.pytrainApp.backbone && window.pytrainApp.backbone.info", timeout=wait_ms(60_000))
    page.select_option("#ex-backbone-norm", "imagenet")
    page.wait_for_function("() => window.pytrainApp.backbone && "
                           "window.pytrainApp.backbone.info.normalize === 'imagenet'", timeout=wait_ms(60_000))
    counts = _record_examples(page)
    assert counts[0][1] >= 5, counts
    thumb_camera = _thumbs(page, 1)
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone'",
                           timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, 2, 180_000, batch_size=4, lr=0.01)
    step, digest = app_state(page, "a.step"), page.evaluate(DIGEST)
    x = np.random.RandomState(0).rand(3, 3, SIDE, SIDE).astype(np.float32).reshape(-1).tolist()
    probe, on_examples = page.evaluate(PREDICT, x)["outputs"], page.evaluate(PREDICT_EXAMPLES)
    assert len(on_examples) == sum(n for _, n in counts)
    with page.expect_download() as dl:
        page.click("#download-run")
    run_zip = tmp_path / "run.zip"
    dl.value.save_as(str(run_zip))

    # one more epoch without a reload (not saved: the browser keeps the run at epoch 2)...
    ours = _continue_one_epoch(page, 3, via_start=False)
    after = page.evaluate(DIGEST)
    # ...and the same epoch after a reload and resume
    resumed = _resume_after_reload(page, "by-example head on bb.onnx")
    assert resumed["step"] == step and resumed["digest"] == resumed["savedDigest"] == digest
    assert app_state(page, "a.model.origin") == "backbone"
    assert _gallery(page) == counts                       # names and counts, thumbnails drawn
    assert page.inner_text("#ex-info") == "%d examples in 2 classes. Build: a head on bb.onnx." % sum(
        n for _, n in counts)
    assert "bb.onnx, restored with the run" in page.inner_text("#ex-backbone-info")
    assert page.input_value("#ex-backbone-norm") == "imagenet" and page.locator("#ex-backbone-norm").is_disabled()
    assert page.is_enabled("#ex-build")
    # the last camera frame's thumbnail, drawn again from the 32x32 pixels the model trains on
    assert _thumbs(page, 1) == thumb_camera
    assert page.evaluate(PREDICT, x)["outputs"] == probe
    assert page.evaluate(PREDICT_EXAMPLES) == on_examples  # bit for bit: the saved features came back
    assert axe_violations(page) == []
    if backbone == "torch":
        shoot(page, "by-example-restored")
    theirs = _continue_one_epoch(page, 3, via_start=True)
    assert len(ours) >= 3 and theirs == ours
    assert page.evaluate(DIGEST) == after
    assert app_state(page, "a.errors") == []
    announced = app_state(page, "a.announced")
    assert not [t for t in announced if "example" in t.lower()], announced   # the gallery is shown, not announced

    # the run file in another browser (none of this one's storage: the session browser's context, its site storage
    # cleared; a fresh one with PYTRAIN_TEST_FIRST_VISITS=1): the same gallery, and the saved backbone builds again
    rec2 = Recorder()
    with lent_or_fresh_context(request, browser, rec2) as ctx:
        fresh = open_app(ctx, site_url, rec2)
        wait_ready(fresh)
        fresh.click("button[data-tab=model]")
        fresh.set_input_files("#artifact-files", files=[str(run_zip)])
        fresh.click("#artifacts-use")
        fresh.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone'",
                                timeout=LOAD_TIMEOUT_MS)
        assert app_state(fresh, "a.step") == step and fresh.evaluate(DIGEST) == digest
        fresh.click("#tabbtn-examples")
        assert _gallery(fresh) == counts
        assert fresh.evaluate(PREDICT_EXAMPLES) == on_examples
        assert "a head on bb.onnx" in fresh.inner_text("#ex-info")
        # delete one example of "Grey", add a class, build again: the head on the restored backbone
        fresh.click("#ex-classes fieldset:nth-of-type(2) .ex-item button >> nth=0")
        fresh.click("#ex-add-class")
        assert _gallery(fresh) == [counts[0], ["Grey", counts[1][1] - 1], ["Class 3", 0]]
        fresh.click("#ex-build")
        fresh.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone' "
                                "&& window.pytrainApp.step === 0", timeout=LOAD_TIMEOUT_MS)
        data, model = app_state(fresh, "a.data"), app_state(fresh, "a.model")
        assert data["classes"] == ["Camera", "Grey"] and data["train"] + data["val"] == sum(n for _, n in counts) - 1
        assert model["backbone"]["name"] == "bb.onnx" and model["backbone"]["normalize"] == "imagenet"
        k = model["backbone"]["features"]
        assert k == (8 if backbone == "torch" else 3) and model["params"] == model["head_params"] == k * 2 + 2
        assert app_state(fresh, "a.errors") == [] and axe_violations(fresh) == []
        assert rec2.foreign(site_url) == []
    assert rec.foreign(site_url) == []


def test_cnn_run_resumed_shows_its_gallery_and_rebuilds_from_it(camera_page, site_url):  # noqa: F811
    page, rec = camera_page
    counts = _record_examples(page, n_files=6)
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'cnn'",
                           timeout=LOAD_TIMEOUT_MS)
    train_epochs(page, 1, 180_000, batch_size=4, lr=0.003)
    digest, on_examples = page.evaluate(DIGEST), page.evaluate(PREDICT_EXAMPLES)
    ours = _continue_one_epoch(page, 2, via_start=False)

    resumed = _resume_after_reload(page, "by-example CNN")
    assert resumed["digest"] == digest and app_state(page, "a.model.origin") == "cnn"
    assert _gallery(page) == counts
    assert page.inner_text("#ex-info").endswith("Build: a small CNN from scratch.")
    assert page.evaluate(PREDICT_EXAMPLES) == on_examples
    theirs = _continue_one_epoch(page, 2, via_start=True)
    assert len(ours) >= 3 and theirs == ours

    # the restored examples are the ones a rebuild trains on: delete one, build, train
    page.click("#ex-classes fieldset:nth-of-type(1) .ex-item button >> nth=0")
    assert _gallery(page) == [["Camera", counts[0][1] - 1], counts[1]]
    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'cnn' "
                           "&& window.pytrainApp.step === 0", timeout=LOAD_TIMEOUT_MS)
    data = app_state(page, "a.data")
    assert data["classes"] == ["Camera", "Grey"] and data["train"] + data["val"] == sum(n for _, n in counts) - 1
    epochs = train_epochs(page, 1, 180_000, batch_size=4, lr=0.003)
    assert np.isfinite(epochs[-1]["loss"])
    assert app_state(page, "a.errors") == []
    assert rec.foreign(site_url) == []
