"""By example with a pretrained feature extractor: a tiny torch conv backbone (BatchNorm,
Dropout) exported by torch's default (dynamo) exporter with its weights in a ``.onnx.data`` file is
chosen on the page; only a new head trains on its features; live prediction from the (fake) camera
runs backbone + head; the exported model (one graph) answers in onnxruntime like the page did.
Also: a bad backbone is refused next to its file input, the run file downloads, and the
plots' legends stay inside their canvases on a 390 px wide phone screen."""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, app_state, shot, train_epochs, wait_ready
from test_page_a11y import axe_violations, shoot
from test_page_by_example import _hold_until, camera_page  # noqa: F401  (the fake-camera fixture)
from test_tables_and_models import _png

#: the app's starts here assert nothing about a first visit: they share one context, its storage cleared after each test
pytestmark = pytest.mark.second_visit

SIDE = 32
PREDICT = ("(x) => window.pytrainApp.client.call('predict', {x: new Float32Array(x), shape: [3, 3, %d, %d]})"
           % (SIDE, SIDE))


#: the backbone's files as torch's dynamo exporter writes them, committed with the digest of what made them
#: (make_fixture.py there writes them again): the export costs ~6 CPU s the first time in a process, 2 after
BACKBONE_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "backbone"


def _backbone_net(torch):
    """Conv-BN-ReLU-Dropout-Conv-ReLU, 3x32x32 in, 8 feature maps out, its weights and BatchNorm statistics seeded."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Dropout(0.5), torch.nn.Conv2d(4, 8, 3, stride=2), torch.nn.ReLU())
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.3, 3.0)
    return net.eval()


def export_backbone(torch, net, folder: Path) -> None:
    """bb.onnx + bb.onnx.data in ``folder``: torch's default (dynamo) exporter, the batch dynamic, the weights in
    an external data file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(net, (torch.zeros(2, 3, SIDE, SIDE),), dynamo=True, input_names=["img"],
                                 output_names=["maps"], dynamic_shapes={"input": {0: torch.export.Dim("b")}})
        prog.save(str(folder / "bb.onnx"), external_data=True)


def backbone_digest(torch, net) -> str:
    """What determines the exported files: torch's version, the export's settings and the net's state."""
    h = hashlib.sha256(("%s|dynamo, img %d x %d, batch dynamic, external data|" % (torch.__version__, SIDE, SIDE))
                       .encode())
    for name, v in sorted(net.state_dict().items()):
        h.update(name.encode() + str(tuple(v.shape)).encode() + v.detach().numpy().tobytes())
    h.update(str(net).encode())
    return h.hexdigest()


def _backbone(tmp_path):
    """bb.onnx + bb.onnx.data (``_backbone_net`` exported by torch's dynamo exporter), as files for an input: the
    committed ones when their digest is the one of the net and torch now (a fixture made from another fails,
    naming the script that makes it again); PYTRAIN_LIVE_ORACLES=1 exports into ``tmp_path`` instead."""
    torch = pytest.importorskip("torch")
    net = _backbone_net(torch)
    folder = BACKBONE_FIXTURE
    if os.environ.get("PYTRAIN_LIVE_ORACLES") == "1":
        folder = tmp_path
        export_backbone(torch, net, folder)
    elif json.loads((folder / "made.json").read_text())["digest"] != backbone_digest(torch, net):
        pytest.fail("%s is stale (made from another net or another torch): run python %s"
                    % (folder, folder / "make_fixture.py"))
    files = sorted(p for p in folder.iterdir() if p.name.startswith("bb.onnx"))
    assert any(p.name.endswith(".data") for p in files), "expected the weights in an external data file"
    return [{"name": p.name, "mimeType": "application/octet-stream", "buffer": p.read_bytes()} for p in files]


def _legends_inside(page):
    """Every legend entry of both plots inside its canvas (and the plots' container), drawn at the
    canvas's current size."""
    # the ResizeObserver and the plots' throttled redraw: wait until both canvases are drawn at their size
    page.wait_for_function("""() => ['loss', 'metric'].every((k) => {
        const p = window.pytrainApp.plots[k], c = p.canvas;
        return p.legendBoxes && p.legendBoxes.length > 0 && c.width === Math.round(c.clientWidth * (window.devicePixelRatio || 1));
    })""", timeout=wait_ms(30_000))
    res = page.evaluate("""() => ['loss', 'metric'].map((k) => {
        const p = window.pytrainApp.plots[k], c = p.canvas, r = c.getBoundingClientRect();
        const box = c.closest('.plots').getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
        return {k, boxes: p.legendBoxes || null, w: c.clientWidth, h: c.clientHeight,
                left: r.left + c.clientLeft, top: r.top + c.clientTop,
                drawn: c.width === Math.round(c.clientWidth * dpr),
                container: [box.left, box.top, box.right, box.bottom]};
    })""")
    for p in res:
        assert p["drawn"], p
        assert p["boxes"], p
        for b in p["boxes"]:
            assert 0 <= b["x"] and b["x"] + b["w"] <= p["w"], (p["k"], b, p)
            assert 0 <= b["y"] and b["y"] + b["h"] <= p["h"], (p["k"], b, p)
            left, top, right, bottom = p["container"]
            assert left <= p["left"] + b["x"] and p["left"] + b["x"] + b["w"] <= right, (p["k"], b, p)
            assert top <= p["top"] + b["y"] and p["top"] + b["y"] + b["h"] <= bottom, (p["k"], b, p)
    return res


def test_backbone_head_trains_predicts_and_exports(camera_page, site_url, tmp_path):  # noqa: F811
    ort = pytest.importorskip("onnxruntime")
    backbone_files = _backbone(tmp_path)
    page, rec = camera_page

    # a file that is not an image model: refused right under the backbone input, focused
    page.set_input_files("#ex-backbone", files=[{"name": "bad.onnx", "mimeType": "application/octet-stream",
                                                 "buffer": b"name,label\n1,2\n"}])
    page.wait_for_selector("#error", state="visible", timeout=wait_ms(30_000))
    assert "bad.onnx" in page.inner_text("#error-text") and "ONNX" in page.inner_text("#error-text")
    assert page.evaluate("document.getElementById('error').closest('fieldset').id") == "ex-backbone-box"
    assert page.evaluate("document.activeElement.id") == "error"
    assert app_state(page, "a.backbone") is None
    page.click("#error-close")

    # the backbone with its external data file
    page.set_input_files("#ex-backbone", files=backbone_files)
    page.wait_for_function("() => window.pytrainApp.backbone && window.pytrainApp.backbone.info", timeout=wait_ms(60_000))
    info = app_state(page, "a.backbone.info")
    assert info["shape"] == [3, SIDE, SIDE] and info["features"] == 8 and not info["open_size"]
    assert page.locator("#ex-backbone-size").is_disabled()   # its input size is fixed: nothing to choose
    assert page.input_value("#ex-backbone-size") == str(SIDE)
    page.select_option("#ex-backbone-norm", "imagenet")
    page.wait_for_function("() => window.pytrainApp.backbone && window.pytrainApp.backbone.normalize === 'imagenet'"
                           " && window.pytrainApp.backbone.info.normalize === 'imagenet'", timeout=wait_ms(60_000))
    text = page.inner_text("#ex-backbone-info")
    assert "frozen" in text and "ImageNet" in text and "8 features" in text, text

    # examples: class 1 from the camera (hold to record), class 2 from files
    page.fill("#ex-classes fieldset:nth-of-type(2) legend input", "Grey")
    page.dispatch_event("#ex-classes fieldset:nth-of-type(2) legend input", "change")
    page.locator("#ex-classes fieldset:nth-of-type(1) .ex-record").scroll_into_view_if_needed()
    _hold_until(page, "#ex-classes fieldset:nth-of-type(1) .ex-record", "window.pytrainApp.examples[0].items.length >= 5")
    n1 = app_state(page, "a.examples[0].items.length")
    assert n1 >= 5, (n1, app_state(page, "a.errors"))
    files = [{"name": "g%d.png" % i, "mimeType": "image/png",
              "buffer": _png(np.full((40, 40), 40 + 12 * i, np.uint8))} for i in range(8)]
    page.set_input_files("#ex-classes fieldset:nth-of-type(2) input[type=file]", files=files)
    page.wait_for_function("() => window.pytrainApp.examples[1].items.length === 8", timeout=wait_ms(30_000))
    assert "a head on bb.onnx" in page.inner_text("#ex-info")
    assert axe_violations(page) == []
    shoot(page, "by-example-backbone")

    page.click("#ex-build")
    page.wait_for_function("() => window.pytrainApp.model && window.pytrainApp.model.origin === 'backbone'",
                           timeout=LOAD_TIMEOUT_MS)
    model = app_state(page, "a.model")
    assert model["sample_shape"] == [3, SIDE, SIDE]
    assert model["params"] == model["head_params"] == 8 * 2 + 2          # only the head trains
    setup = page.inner_text("#setup-status")
    assert "frozen" in setup and "%d parameters, frozen" % model["backbone"]["params"] in setup, setup
    assert "18 parameters, trained" in setup, setup
    data = app_state(page, "a.data")
    assert data["sample_shape"] == [3, SIDE, SIDE] and data["train"] + data["val"] == n1 + 8
    epochs = train_epochs(page, 4, 180_000, batch_size=4, lr=0.01)
    assert all(np.isfinite(e["loss"]) for e in epochs)

    # the plots' legends stay inside the plots, on a desktop and on a phone
    _legends_inside(page)
    page.set_viewport_size({"width": 390, "height": 844})
    phone = _legends_inside(page)
    shot(page.locator(".plots"), "by-example-backbone-plots-390")
    assert any(b["y"] > 30 for b in phone[0]["boxes"]), "the loss legend should wrap under the plot at 390 px"
    page.set_viewport_size({"width": 1280, "height": 800})
    shoot(page, "by-example-backbone-trained")

    # live prediction from the camera: backbone + head
    page.click("#cam-predict")
    page.wait_for_function("() => window.pytrainApp.lastPrediction && window.pytrainApp.lastPrediction.input",
                           timeout=wait_ms(30_000))
    last = app_state(page, "a.lastPrediction")
    assert last["label"] in ("Class 1", "Grey")
    page.click("#cam-predict")     # stop

    # the run file downloads, saying why the CLI cannot continue it (test_page_run_file_backbone.py)
    with page.expect_download():
        page.click("#download-run")
    page.locator("#run-file-note").wait_for(state="visible", timeout=wait_ms(30_000))

    # the export: one graph, backbone + head, answering like the page
    with page.expect_download() as dl:
        page.click("#download-model")
    path = tmp_path / "backbone_head.onnx"
    dl.value.save_as(str(path))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("backbone_head") and p.name.endswith(".data")]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    frame = np.array(last["input"], np.float32).reshape(1, 3, SIDE, SIDE)
    out = sess.run(None, {sess.get_inputs()[0].name: frame})[0]
    np.testing.assert_allclose(out[0], np.array(last["outputs"], np.float32), rtol=1e-4, atol=1e-4)
    rng = np.random.default_rng(0)
    x = rng.random((3, 3, SIDE, SIDE), dtype=np.float32)
    res = page.evaluate(PREDICT, x.reshape(-1).tolist())
    np.testing.assert_allclose(sess.run(None, {sess.get_inputs()[0].name: x})[0],
                               np.array(res["outputs"], np.float32), rtol=1e-4, atol=1e-4)
    import onnx
    m = onnx.load(str(path))
    names = {t.name for t in m.graph.initializer}
    assert any(n.startswith("backbone/") for n in names) and any(n.startswith("head/") for n in names)
    assert not [n for n in m.graph.node if n.op_type in ("Dropout",)]
    assert "bad.onnx" in app_state(page, "a.errors")[-1]   # the only error: the bad backbone above

    # reload: the run saved in this browser comes back with its backbone, answering the same
    step = app_state(page, "a.step")
    page.reload()
    page.locator("#resume-banner").wait_for(state="visible", timeout=wait_ms(30_000))
    wait_ready(page)
    page.click("#resume-btn")
    page.wait_for_function("() => window.pytrainApp.resumed !== null && !window.pytrainApp.training",
                           timeout=wait_ms(60_000))
    resumed = app_state(page, "a.resumed")
    assert resumed["digest"] == resumed["savedDigest"] and resumed["step"] == step
    assert app_state(page, "a.model.origin") == "backbone"
    res = page.evaluate(PREDICT, x.reshape(-1).tolist())
    np.testing.assert_allclose(sess.run(None, {sess.get_inputs()[0].name: x})[0],
                               np.array(res["outputs"], np.float32), rtol=1e-4, atol=1e-4)
    assert rec.foreign(site_url) == []
