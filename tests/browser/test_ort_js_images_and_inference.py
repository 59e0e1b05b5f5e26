"""web/pytrain-ort.js beyond training: ``Tensor.fromImage`` / ``toImageData`` against onnxruntime-common
1.19.2's own (npm, run in the same tab on the same ImageData, HTMLImageElement, ImageBitmap and URL, with
ORT's options), and ``InferenceSession`` on an exported model against onnxruntime (Python) on the same
input tensor."""
from __future__ import annotations

import json

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, open_app, serve_files

from buildsite.installs import ORT_TYPES_NPM, ensure_npm_folder
from pytrain.generator import artifacts, models
from pytrain import webapp
from pytrain.device.api import CheckpointState, Module, Optimizer

WIDTH, HEIGHT, CLASSES = 8, 6, 3
#: ImageNet's normalisation as ORT's norm takes it: (pixel + bias) / mean
NORM = {"mean": [58.395, 57.12, 57.375], "bias": [-123.675, -116.28, -103.53]}

PAGE = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import * as ort from "/pytrain-ort.js";
import * as ortc from "/ort-common/dist/esm/index.js";
window.__images = (async () => {
  const get = async (u) => new Uint8Array(await (await fetch("/ort-test/" + u)).arrayBuffer());
  const meta = JSON.parse(new TextDecoder().decode(await get("image.json")));
  const imageData = new ImageData(new Uint8ClampedArray(meta.rgba), meta.width, meta.height);
  const translucent = new ImageData(new Uint8ClampedArray(meta.translucent), meta.width, meta.height);
  const canvas = document.createElement("canvas");
  canvas.width = meta.width; canvas.height = meta.height;
  canvas.getContext("2d").putImageData(imageData, 0, 0);
  const url = canvas.toDataURL("image/png");
  const img = new Image();
  img.src = url;
  await img.decode();
  const bitmap = await createImageBitmap(imageData);
  const sources = { imageData, translucent, img, bitmap, url };
  const copy = (o) => (o == null ? undefined : JSON.parse(JSON.stringify(o)));   // null: no options
  const out = { cases: [], errors: {} };
  for (const [name, options] of meta.cases) {
    const mine = await ort.Tensor.fromImage(sources[name], copy(options));
    const theirs = await ortc.Tensor.fromImage(sources[name], copy(options));
    out.cases.push({ name, options, type: mine.type, dims: mine.dims, theirsType: theirs.type,
                     theirsDims: Array.from(theirs.dims), data: Array.from(mine.data),
                     same: mine.data.length === theirs.data.length && mine.data.every((v, i) => Object.is(v, theirs.data[i])) });
  }
  // a canvas (pytrain's addition) reads as its ImageBitmap does in onnxruntime-common
  const fromCanvas = await ort.Tensor.fromImage(canvas);
  const fromBitmap = await ortc.Tensor.fromImage(bitmap, {});
  out.canvasSame = fromCanvas.data.every((v, i) => Object.is(v, fromBitmap.data[i]));
  // back to pixels
  const t = await ort.Tensor.fromImage(imageData);
  const tc = await ortc.Tensor.fromImage(imageData);
  const back = t.toImageData(), backTheirs = tc.toImageData();
  out.toImageData = { same: back.data.every((v, i) => v === backTheirs.data[i]), pixels: Array.from(back.data),
                      size: [back.width, back.height] };
  out.dataUrl = t.toDataURL().startsWith("data:image/png;base64,");
  const expectError = async (key, fn) => { try { await fn(); out.errors[key] = null; } catch (e) { out.errors[key] = String(e.message || e); } };
  for (const [key, src, options] of [["nhwc", imageData, { tensorLayout: "NHWC" }], ["bitmapNoOptions", bitmap, undefined],
                                      ["imgTensorFormat", img, { tensorFormat: "RGB" }], ["notAnImage", 42, undefined]]) {
    await expectError("mine:" + key, () => ort.Tensor.fromImage(src, options));
    await expectError("theirs:" + key, () => ortc.Tensor.fromImage(src, options));
  }

  // InferenceSession: the exported model, from a URL and from an ArrayBuffer
  const x = await ort.Tensor.fromImage(imageData, { norm: meta.norm });
  const byUrl = await ort.InferenceSession.create("/ort-test/model.onnx", { executionProviders: ["wasm"] });
  const bytes = await get("model.onnx");
  const byBuffer = await ort.InferenceSession.create(bytes.buffer);
  out.names = [byUrl.inputNames, byUrl.outputNames];
  const r1 = await byUrl.run({ [byUrl.inputNames[0]]: x });
  const r2 = await byBuffer.run({ [byUrl.inputNames[0]]: x }, [byUrl.outputNames[0]]);
  const o1 = r1[byUrl.outputNames[0]], o2 = r2[byUrl.outputNames[0]];
  out.inference = { x: Array.from(x.data), xDims: x.dims, type: o1.type, dims: o1.dims, y: Array.from(o1.data),
                    same: o1.data.every((v, i) => Object.is(v, o2.data[i])) };
  await expectError("missingInput", () => byUrl.run({}));
  await expectError("badFetch", () => byUrl.run({ [byUrl.inputNames[0]]: x }, ["nope"]));
  await expectError("badDims", () => byUrl.run({ [byUrl.inputNames[0]]: x.reshape([1, 3, meta.width, meta.height]) }));
  await expectError("badModel", () => ort.InferenceSession.create(new Uint8Array([1, 2, 3])));
  await byUrl.release();
  await expectError("released", () => byUrl.run({ [byUrl.inputNames[0]]: x }));
  await byBuffer.release();
  return out;
})().catch((e) => ({ failed: String((e && e.stack) || e) })).then((r) => { window.__imagesResult = r; });
</script>
"""

#: (source, options): each read by pytrain-ort.js and by onnxruntime-common 1.19.2 in the tab
CASES = [
    ("imageData", None),
    ("imageData", {"tensorFormat": "BGR", "norm": NORM}),
    ("imageData", {"resizedWidth": 5, "resizedHeight": 4, "tensorFormat": "RGBA", "norm": {"mean": 1, "bias": 0}}),
    ("translucent", {"tensorFormat": "RGBA"}),
    ("img", None),
    ("img", {"resizedWidth": 4, "resizedHeight": 3, "norm": {"mean": [1, 2, 4, 8], "bias": [1, 2, 3, 4]}}),
    ("bitmap", {"tensorFormat": "RGB"}),
    ("bitmap", {"format": "RGBA", "tensorFormat": "RBG", "norm": {"mean": 2, "bias": 1}}),
    ("url", None),
    ("url", {"tensorFormat": "BGR", "dataType": "uint8"}),
]


def _pixels(seed: int = 0):
    rng = np.random.default_rng(seed)
    rgba = rng.integers(0, 256, size=(HEIGHT, WIDTH, 4), dtype=np.uint8)
    translucent = rgba.copy()
    rgba[..., 3] = 255
    translucent[..., 3] = rng.integers(1, 256, size=(HEIGHT, WIDTH))
    return rgba, translucent


def _exported_model(tmp_path) -> bytes:
    """A small CNN on 3 x HEIGHT x WIDTH images, trained two steps and exported for inference."""
    arts = artifacts.generate_artifacts(models.cnn((3, HEIGHT, WIDTH), CLASSES, channels=(4,), hidden=8),
                                        loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    rng = np.random.default_rng(1)
    for _ in range(2):
        module(rng.random((4, 3, HEIGHT, WIDTH), dtype=np.float32), rng.integers(0, CLASSES, 4))
        opt.step()
        module.lazy_reset_grad()
    path = tmp_path / "model.onnx"
    module.export_model_for_inferencing(str(path), ["output"])
    return path.read_bytes()


def _ort_norm(pixels: np.ndarray, mean, bias) -> np.ndarray:
    """onnxruntime-common's formula, (pixel + bias) / mean per channel, as float32 [1, C, H, W]."""
    c = pixels.shape[-1]
    x = (pixels.astype(np.float64) + np.asarray(bias, np.float64)[:c]) / np.asarray(mean, np.float64)[:c]
    return x.astype(np.float32).transpose(2, 0, 1)[None]


def test_from_image_and_inference_session_match_onnxruntime(context, site_url, tmp_path):
    ort_common = ensure_npm_folder("ort-types", ORT_TYPES_NPM) / "node_modules" / "onnxruntime-common"
    ctx, rec = context
    rgba, translucent = _pixels()
    model = _exported_model(tmp_path)
    files = {"/ort-test/images.html": PAGE.encode(), "/ort-test/model.onnx": model,
             "/ort-test/image.json": json.dumps({"width": WIDTH, "height": HEIGHT, "rgba": rgba.ravel().tolist(),
                                                 "translucent": translucent.ravel().tolist(), "norm": NORM,
                                                 "cases": [[n, o] for n, o in CASES]}).encode()}
    for f in (ort_common / "dist" / "esm").glob("*.js"):
        files["/ort-common/dist/esm/" + f.name] = f.read_bytes()
    serve_files(ctx, files, prefixes=("ort-test", "ort-common"))
    page = open_app(ctx, site_url, rec, "ort-test/images.html")
    page.wait_for_function("() => window.__imagesResult !== undefined", timeout=LOAD_TIMEOUT_MS + 60_000)
    out = page.evaluate("window.__imagesResult")
    assert "failed" not in out, out.get("failed")

    # fromImage: onnxruntime-common's own result in every case, bit for bit
    for case in out["cases"]:
        assert case["same"] and case["type"] == case["theirsType"] == "float32", case["name"]
        assert case["dims"] == case["theirsDims"], case["name"]
    first, bgr, cropped = out["cases"][0], out["cases"][1], out["cases"][2]
    # ... and the formula on the pixels in Python: ImageData reads RGB, / 255 by default
    np.testing.assert_array_equal(np.array(first["data"], np.float32),
                                  _ort_norm(rgba[..., :3], [255] * 3, [0] * 3).ravel())
    want_bgr = _ort_norm(rgba[..., :3], NORM["mean"], NORM["bias"])[:, ::-1]
    np.testing.assert_array_equal(np.array(bgr["data"], np.float32), want_bgr.ravel())
    # ORT 1.19's resizedWidth/Height read that corner of the image (no scaling)
    assert cropped["dims"] == [1, 4, 4, 5]
    np.testing.assert_array_equal(np.array(cropped["data"], np.float32),
                                  _ort_norm(rgba[:4, :5], [1] * 4, [0] * 4).ravel())
    assert out["canvasSame"]
    assert out["toImageData"]["same"] and out["toImageData"]["size"] == [WIDTH, HEIGHT]
    np.testing.assert_array_equal(np.array(out["toImageData"]["pixels"], np.uint8).reshape(HEIGHT, WIDTH, 4), rgba)
    assert out["dataUrl"]
    errors = out["errors"]
    for key in ("nhwc", "bitmapNoOptions", "imgTensorFormat", "notAnImage"):
        assert errors["mine:" + key] and errors["mine:" + key] == errors["theirs:" + key], key

    # InferenceSession: onnxruntime (Python) on the same input tensor
    ort = pytest.importorskip("onnxruntime")
    inf = out["inference"]
    x = np.array(inf["x"], np.float32).reshape(inf["xDims"])
    np.testing.assert_array_equal(x, _ort_norm(rgba[..., :3], NORM["mean"], NORM["bias"]))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert out["names"] == [[i.name for i in sess.get_inputs()], [o.name for o in sess.get_outputs()]]
    (want,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert inf["type"] == "float32" and inf["dims"] == list(want.shape) == [1, CLASSES]
    np.testing.assert_allclose(np.array(inf["y"], np.float32), want.ravel(), rtol=1e-5, atol=1e-6)
    assert inf["same"]
    assert "input 'input' is missing" in errors["missingInput"]
    assert "invalid output name: nope" in errors["badFetch"]
    assert "the model takes dims ['?', 3, %d, %d], the tensor has [1, 3, %d, %d]" % (HEIGHT, WIDTH, WIDTH, HEIGHT) \
        in errors["badDims"]
    assert "not a valid ONNX file" in errors["badModel"]
    assert "released" in errors["released"]
    assert rec.foreign(site_url) == []


def test_worker_facade_runs_inference_sessions():
    """The Python half of InferenceSession (pytrain.webapp.ort_session), as the worker calls it."""
    model = models.cnn((3, HEIGHT, WIDTH), CLASSES, channels=(4,), hidden=8).SerializeToString()
    session = webapp.Session()

    def call(args, blobs=()):
        text, out = webapp.call(session, "ort", json.dumps(args), list(blobs))
        return json.loads(text), out

    created, _ = call({"op": "inference_create", "model": {"$blob": 0}}, [model])
    assert created["result"]["inputNames"] == ["input"] and created["result"]["outputNames"] == ["output"]
    sid = created["result"]["session"]
    x = np.random.default_rng(0).random((2, 3, HEIGHT, WIDTH), dtype=np.float32)
    feeds = {"input": {"type": "float32", "dims": list(x.shape), "data": {"$blob": 0}}}
    reply, out = call({"op": "inference_run", "session": sid, "feeds": feeds}, [x.tobytes()])
    res = reply["result"]["output"]
    ort = pytest.importorskip("onnxruntime")
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert res["dims"] == [2, CLASSES]
    np.testing.assert_allclose(out[res["data"]["$blob"]].view(np.float32).reshape(want.shape), want, rtol=1e-5,
                               atol=1e-6)
    reply, _ = call({"op": "train_step", "session": sid, "feeds": {}})
    assert "is an inference session" in reply["error"]["message"]
    reply, _ = call({"op": "inference_run", "session": sid, "feeds": feeds, "fetches": ["nope"]}, [x.tobytes()])
    assert "invalid output name 'nope'" in reply["error"]["message"]
    call({"op": "release", "session": sid})
    reply, _ = call({"op": "inference_run", "session": sid, "feeds": feeds}, [x.tobytes()])
    assert "released" in reply["error"]["message"]
