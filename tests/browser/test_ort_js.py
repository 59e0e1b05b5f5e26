"""web/pytrain-ort.js: onnxruntime-web's training API on pytrain, in the browser.

The bench's onnxruntime-web page (bench/pages/ort.html) is read at test time and only its import of
onnxruntime-web is swapped for pytrain-ort.js; it must give the losses pytrain gives in Python for
the same artifacts and batch. A second page drives the rest of the API (names, eval steps, fetches,
the contiguous-parameter hooks of federated learning, errors)."""
from __future__ import annotations

import difflib
import json
import re
from typing import Dict, List

import numpy as np
import pytest

from browser_helpers import wait_ms, LOAD_TIMEOUT_MS, open_app, serve_files

from pytrain.generator import artifacts, models
from pytrain import webapp
from pytrain.device.api import CheckpointState, Module, Optimizer
from build import ROOT

BENCH_PAGES = ROOT / "bench" / "pages"
ORT_PAGE = BENCH_PAGES / "ort.html"
MODULE_URL = "/pytrain-ort.js"
BATCH, FEATURES, CLASSES = 64, 784, 10
ART_FILES = {"checkpoint": "checkpoint", "training_model.onnx": "training_model",
             "eval_model.onnx": "eval_model", "optimizer_model.onnx": "optimizer_model"}

# A classic <script src> loading onnxruntime-web's training build (ort.training.wasm[.min].js).
_ORT_SCRIPT = re.compile(r'[ \t]*<script\s+src="[^"]*onnxruntime-web/[^"]*"\s*>\s*</script>[ \t]*\n')


def swap_ort_import(html: str, module_url: str = MODULE_URL) -> str:
    """The page with onnxruntime-web's import replaced by pytrain-ort.js and nothing else changed.

    pytrain-ort.js is an ES module (as onnxruntime-web's ort.training.wasm.min.mjs is), so the
    classic ``<script src=ort...>`` goes and the page's script that uses ``ort`` imports it instead.
    """
    m = _ORT_SCRIPT.search(html)
    assert m, "the page does not load onnxruntime-web with a <script src> tag"
    before, after = html[:m.start()], html[m.end():]
    assert after.count("<script>") >= 1, "no inline script after onnxruntime-web's"
    after = after.replace("<script>", '<script type="module">import * as ort from "%s";' % module_url, 1)
    return before + after


def _batch(seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input": rng.random((BATCH, FEATURES), dtype=np.float32),
            "labels": rng.integers(0, CLASSES, size=(BATCH,), dtype=np.int64)}


def _batch_files(batch: Dict[str, np.ndarray]) -> Dict[str, bytes]:
    """batch.json + batch.bin in the bench's format (bench/workloads.py, read by bench/pages/common.js)."""
    manifest, blob = {}, b""
    for name, a in batch.items():
        raw = np.ascontiguousarray(a).tobytes()
        manifest[name] = {"shape": list(a.shape), "dtype": str(a.dtype), "offset": len(blob), "nbytes": len(raw)}
        blob += raw
    return {"batch.json": json.dumps(manifest).encode(), "batch.bin": blob}


@pytest.fixture(scope="module")
def arts():
    """pytrain artifacts of the bench's MLP workload shape (784-128-10, cross-entropy, AdamW)."""
    return artifacts.generate_artifacts(models.mlp(FEATURES, [128], CLASSES), loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW)


def _python_run(arts, batch, steps: int):
    """pytrain in Python: the loss of each train step, then the eval loss and the trainable parameters."""
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    losses: List[float] = []
    for _ in range(steps):
        losses.append(float(np.asarray(module(batch["input"], batch["labels"])).ravel()[0]))
        opt.step()
        module.lazy_reset_grad()
    module.eval()
    eval_loss = float(np.asarray(module(batch["input"], batch["labels"])).ravel()[0])
    return losses, eval_loss, module.get_contiguous_parameters(trainable_only=True)


# ---------------------------------------------------------------- without a browser

def test_swap_changes_only_the_import():
    original = ORT_PAGE.read_text(encoding="utf-8")
    swapped = swap_ort_import(original)
    diff = [ln for ln in difflib.unified_diff(original.splitlines(), swapped.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert diff == ['-<script src="/bench/node_modules/onnxruntime-web/dist/ort.training.wasm.min.js"></script>',
                    '-<script>', '+<script type="module">import * as ort from "/pytrain-ort.js";']


def test_worker_facade_runs_ort_session_calls(arts):
    """The Python half (pytrain.webapp.ort_session) through the worker's bridge, as the worker calls it."""
    batch = _batch(1)
    session = webapp.Session()

    def call(args, blobs=()):
        text, out = webapp.call(session, "ort", json.dumps(args), list(blobs))
        reply = json.loads(text)
        assert reply["ok"], reply
        return reply["result"], out

    created, _ = call({"op": "create", "checkpoint": {"$blob": 0}, "train_model": {"$blob": 1},
                       "eval_model": {"$blob": 2}, "optimizer_model": {"$blob": 3}},
                      [arts.checkpoint, arts.training_model, arts.eval_model, arts.optimizer_model])
    assert created["trainingInputNames"] == ["input", "labels"] and created["trainingOutputNames"] == ["loss"]
    assert created["evalInputNames"] == ["input", "labels"] and created["evalOutputNames"] == ["loss"]
    sid = created["session"]
    feeds = {"input": {"type": "float32", "dims": [BATCH, FEATURES], "data": {"$blob": 0}},
             "labels": {"type": "int64", "dims": [BATCH], "data": {"$blob": 1}}}
    raw = [batch["input"].tobytes(), batch["labels"].tobytes()]
    losses = []
    for _ in range(3):
        res, out = call({"op": "train_step", "session": sid, "feeds": feeds}, raw)
        assert res["loss"]["type"] == "float32"
        losses.append(float(out[res["loss"]["data"]["$blob"]].view(np.float32)[0]))
        call({"op": "optimizer_step", "session": sid})
        call({"op": "lazy_reset_grad", "session": sid})
    want, want_eval, want_params = _python_run(arts, batch, 3)
    np.testing.assert_allclose(losses, want, rtol=1e-6)
    res, out = call({"op": "contiguous_parameters", "session": sid, "trainable_only": True})
    params = out[0].view(np.float32)
    assert res["dims"] == [want_params.size]
    np.testing.assert_array_equal(params, want_params)
    text, _ = webapp.call(session, "ort", json.dumps({"op": "load_parameters", "session": sid, "buffer": {"$blob": 0}}),
                          [b"\0" * 8])
    err = json.loads(text)["error"]
    assert err["type"] == "InputError" and "must match the number of parameters" in err["message"]
    call({"op": "release", "session": sid})
    text, _ = webapp.call(session, "ort", json.dumps({"op": "lazy_reset_grad", "session": sid}))
    assert "released" in json.loads(text)["error"]["message"]


# ---------------------------------------------------------------- in Chromium

def _bench_workload(name: str):
    """The bench's own workload (bench/workloads.py): its ONNX export made into pytrain artifacts as the
    bench's pytrain runner makes them (cross-entropy, AdamW), and its fixed batch."""
    pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import workloads
    finally:
        sys.path.remove(str(ROOT / "bench"))
    w = workloads.WORKLOADS[name]
    arts = artifacts.generate_artifacts(workloads.export_onnx(w), loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW)
    return arts, w.batch()


@pytest.mark.parametrize("workload", ["mlp", "emb"])   # float32 pixels; int64 tokens (BigInt64Array)
def test_onnxruntime_web_bench_page_runs_with_only_the_import_changed(context, site_url, workload):
    ctx, rec = context
    arts, batch = _bench_workload(workload)
    warmup, steps = 20, 4
    files = {"/bench/pages/ort.html": swap_ort_import(ORT_PAGE.read_text(encoding="utf-8")).encode(),
             "/bench/pages/common.js": (BENCH_PAGES / "common.js").read_bytes()}
    for fname, attr in ART_FILES.items():
        files["/bench/.cache/art/ort/%s/%s" % (workload, fname)] = getattr(arts, attr)
    for fname, body in _batch_files(batch).items():
        files["/bench/.cache/models/%s/%s" % (workload, fname)] = body
    serve_files(ctx, files)
    page = open_app(ctx, site_url, rec,
                    "bench/pages/ort.html?workload=%s&warmup=%d&steps=%d" % (workload, warmup, steps))
    page.wait_for_function("() => window.__bench && window.__bench.status !== 'running'", timeout=LOAD_TIMEOUT_MS + 180_000)
    bench = page.evaluate("window.__bench")
    assert bench["status"] == "done", bench
    res = bench["result"]
    want, _, _ = _python_run(arts, batch, 1 + warmup + steps)
    # the browser multiplies on the wasm SIMD GEMM: equal up to float32 rounding
    np.testing.assert_allclose([res["first_loss"], res["loss_step21"], res["last_loss"]],
                               [want[0], want[20], want[-1]], rtol=2e-4, atol=1e-5)
    assert want[-1] < want[0] - 0.1   # it trained
    assert rec.foreign(site_url) == []
    assert not any("onnxruntime" in u for u in rec.urls)


API_PAGE = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import * as ort from "/pytrain-ort.js";
window.__api = (async () => {
  const get = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
  const base = "/ort-test/";
  const manifest = JSON.parse(new TextDecoder().decode(await get(base + "batch.json")));
  const bin = await get(base + "batch.bin");
  const slice = (m) => bin.buffer.slice(m.offset, m.offset + m.nbytes);
  const x = new ort.Tensor(new Float32Array(slice(manifest.input)), manifest.input.shape);   // new Tensor(data, dims)
  const y = new ort.Tensor("int64", new BigInt64Array(slice(manifest.labels)), manifest.labels.shape);
  const out = { tensor: { type: x.type, dims: x.dims, size: x.size, yType: y.type } };
  // artifacts as Uint8Arrays
  const s = await ort.TrainingSession.create({
    checkpointState: await get(base + "checkpoint"), trainModel: await get(base + "training_model.onnx"),
    evalModel: await get(base + "eval_model.onnx"), optimizerModel: await get(base + "optimizer_model.onnx"),
  }, { executionProviders: ["wasm"] });
  out.names = { ti: s.trainingInputNames, to: s.trainingOutputNames, ei: s.evalInputNames, eo: s.evalOutputNames };
  out.size = { trainable: await s.getParametersSize(true), all: await s.getParametersSize(false) };
  const p0 = await s.getContiguousParameters(true);
  out.p0 = { type: p0.type, dims: p0.dims, isFloat32: p0.data instanceof Float32Array };
  out.losses = [];
  for (let i = 0; i < 3; i++) {
    const r = i === 0 ? await s.runTrainStep({ input: x, labels: y }, ["loss"])
                      : await s.runTrainStep({ input: x, labels: y });
    out.losses.push(r.loss.data[0]);
    await s.runOptimizerStep();
    await s.lazyResetGrad();
  }
  const pre = new ort.Tensor("float32", new Float32Array(1), [1]);
  const ev = await s.runEvalStep({ input: x, labels: y }, { loss: pre });
  out.evalLoss = ev.loss.data[0];
  out.filledInPlace = ev.loss === pre && pre.data[0] === out.evalLoss;
  const p3 = await s.getContiguousParameters(true);
  out.p3 = Array.from(p3.data);
  // federated learning: a second session (artifacts by URL, no optimizer) takes the trained weights
  const s2 = await ort.TrainingSession.create({ checkpointState: base + "checkpoint",
    trainModel: base + "training_model.onnx", evalModel: base + "eval_model.onnx" });
  out.before = (await s2.runEvalStep({ input: x, labels: y })).loss.data[0];
  await s2.loadParametersBuffer(new Uint8Array(p3.data.buffer, p3.data.byteOffset, p3.data.byteLength), true);
  out.after = (await s2.runEvalStep({ input: x, labels: y })).loss.data[0];
  const back = await s2.getContiguousParameters(true);
  out.roundTrip = back.data.length === p3.data.length && back.data.every((v, i) => Object.is(v, p3.data[i]));
  const all = await s2.getContiguousParameters(false);
  await s2.loadParametersBuffer(new Uint8Array(all.data.buffer), false);
  out.allRoundTrip = (await s2.getContiguousParameters(false)).data.every((v, i) => Object.is(v, all.data[i]));
  const errors = {};
  const expectError = async (name, fn) => { try { await fn(); errors[name] = null; } catch (e) { errors[name] = String(e.message || e); } };
  await expectError("badSize", () => s2.loadParametersBuffer(new Uint8Array(8), true));
  await expectError("noOptimizer", () => s2.runOptimizerStep());
  await expectError("missingInput", () => s.runTrainStep({ input: x }));
  await expectError("badFetch", () => s.runTrainStep({ input: x, labels: y }, ["nope"]));
  await expectError("badDims", () => s.runTrainStep({ input: x.reshape([32, 1568]), labels: y }));
  await expectError("badCheckpoint", () => ort.TrainingSession.create({ checkpointState: new Uint8Array([1, 2, 3]),
    trainModel: base + "training_model.onnx" }));
  await s.release();
  await expectError("released", () => s.runTrainStep({ input: x, labels: y }));
  await s2.release();
  out.errors = errors;
  return out;
})().catch((e) => ({ failed: String((e && e.stack) || e) })).then((r) => { window.__apiResult = r; });
</script>
"""


def test_training_session_api_and_parameter_round_trip(context, site_url, arts):
    ctx, rec = context
    batch = _batch(2)
    files = {"/ort-test/api.html": API_PAGE.encode()}
    for fname, attr in ART_FILES.items():
        files["/ort-test/" + fname] = getattr(arts, attr)
    for fname, body in _batch_files(batch).items():
        files["/ort-test/" + fname] = body
    serve_files(ctx, files)
    page = open_app(ctx, site_url, rec, "ort-test/api.html")
    page.wait_for_function("() => window.__apiResult !== undefined", timeout=LOAD_TIMEOUT_MS + 120_000)
    out = page.evaluate("window.__apiResult")
    assert "failed" not in out, out.get("failed")
    assert out["tensor"] == {"type": "float32", "dims": [BATCH, FEATURES], "size": BATCH * FEATURES, "yType": "int64"}
    assert out["names"] == {"ti": ["input", "labels"], "to": ["loss"], "ei": ["input", "labels"], "eo": ["loss"]}
    n = FEATURES * 128 + 128 + 128 * CLASSES + CLASSES
    assert out["size"] == {"trainable": n, "all": n}
    assert out["p0"] == {"type": "float32", "dims": [n], "isFloat32": True}

    want_losses, want_eval, want_params = _python_run(arts, batch, 3)
    np.testing.assert_allclose(out["losses"], want_losses, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["evalLoss"], want_eval, rtol=1e-4, atol=1e-6)
    assert out["filledInPlace"]
    # Adam divides by sqrt(v): for a near-zero gradient the GEMM's float32 rounding moves that weight's
    # update by a few 1e-6 (an update is at most lr = 1e-3), so weights agree to 2e-5 absolute.
    np.testing.assert_allclose(np.array(out["p3"], np.float32), want_params, rtol=1e-4, atol=2e-5)
    # the second session: the initial weights' loss, then exactly the first session's after loading its buffer
    state0 = CheckpointState.load_checkpoint(arts.checkpoint)
    initial = Module(arts.training_model, state0, arts.eval_model).eval()
    np.testing.assert_allclose(out["before"], float(np.asarray(initial(batch["input"], batch["labels"])).ravel()[0]),
                               rtol=1e-4, atol=1e-6)
    assert out["after"] == pytest.approx(out["evalLoss"], rel=1e-6, abs=1e-7)
    assert out["roundTrip"] and out["allRoundTrip"]
    errors = out["errors"]
    assert "must match the number of parameters" in errors["badSize"]
    assert "no OptimizerModel" in errors["noOptimizer"]
    assert "input 'labels' is missing" in errors["missingInput"]
    assert "invalid output name: nope" in errors["badFetch"]
    assert errors["badDims"] and "input" in errors["badDims"]
    assert "checkpoint" in errors["badCheckpoint"].lower()
    assert "released" in errors["released"]
    assert rec.foreign(site_url) == []


FAIL_PAGE = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import * as ort from "/pytrain-ort.js";
ort.TrainingSession.create({ checkpointState: new Uint8Array(4), trainModel: new Uint8Array(4) })
  .then(() => { window.__created = "resolved"; }, (e) => { window.__created = "rejected: " + e.message; });
</script>
"""


def test_create_rejects_when_python_cannot_start(context, site_url):
    """No worker script: create() rejects with the worker's failure instead of waiting forever."""
    ctx, rec = context
    serve_files(ctx, {"/ort-test/fail.html": FAIL_PAGE.encode()})
    ctx.route(re.compile(r"/worker\.js(\?.*)?$"), lambda route, request: route.fulfill(status=404, body="gone"))
    page = open_app(ctx, site_url, rec, "ort-test/fail.html")
    page.wait_for_function("() => window.__created !== undefined", timeout=wait_ms(60_000))
    assert page.evaluate("window.__created").startswith("rejected: the worker failed")


ORT_FIXTURES = ROOT / "tests" / "compat" / "fixtures" / "ort_checkpoints"

CARRY_PAGE = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import * as ort from "/pytrain-ort.js";
window.__carry = (async () => {
  const get = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
  const base = "/ort-test/";
  const data = JSON.parse(new TextDecoder().decode(await get(base + "data.json")));
  const s = await ort.TrainingSession.create({ checkpointState: await get(base + "ort.ckpt"),
    trainModel: base + "training_model.onnx", evalModel: base + "eval_model.onnx",
    optimizerModel: base + "optimizer_model.onnx" });
  const out = { size: [await s.getParametersSize(true), await s.getParametersSize(false)] };
  out.loaded = Array.from((await s.getContiguousParameters(false)).data);
  const feeds = { input: new ort.Tensor("float32", data.x, data.xdims),
                  labels: new ort.Tensor("int64", data.y, [data.y.length]) };
  out.loss = (await s.runTrainStep(feeds)).loss.data[0];
  await s.runOptimizerStep();
  out.stepped = Array.from((await s.getContiguousParameters(false)).data);
  await s.release();
  return out;
})().catch((e) => ({ failed: String((e && e.stack) || e) })).then((r) => { window.__carryResult = r; });
</script>
"""


def test_onnxruntime_checkpoint_carries_over(context, site_url):
    """A checkpoint onnxruntime-training 1.19.2 wrote (tests/compat/fixtures/ort_checkpoints: two AdamW steps on
    a 4-3-2 MLP with fc2.bias frozen, optimizer state included) trains on in the browser with pytrain's
    artifacts of the same model: its weights come in, and the next step continues ORT's AdamW moments
    exactly as pytrain does in Python."""
    ctx, rec = context
    expected = np.load(str(ORT_FIXTURES / "expected.npz"))
    ckpt = (ORT_FIXTURES / "optimizer.ckpt").read_bytes()
    arts = artifacts.generate_artifacts(models.mlp(4, [3], 2), requires_grad=["fc1.weight", "fc1.bias", "fc2.weight"],
                                        frozen_params=["fc2.bias"], loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW)
    x, y = expected["x1"], expected["y1"]
    files = {"/ort-test/carry.html": CARRY_PAGE.encode(), "/ort-test/ort.ckpt": ckpt,
             "/ort-test/data.json": json.dumps({"x": x.ravel().tolist(), "xdims": list(x.shape),
                                                "y": y.tolist()}).encode()}
    for fname, attr in ART_FILES.items():
        if fname != "checkpoint":
            files["/ort-test/" + fname] = getattr(arts, attr)
    serve_files(ctx, files)
    page = open_app(ctx, site_url, rec, "ort-test/carry.html")
    page.wait_for_function("() => window.__carryResult !== undefined", timeout=LOAD_TIMEOUT_MS + 60_000)
    out = page.evaluate("window.__carryResult")
    assert "failed" not in out, out.get("failed")

    # pytrain in Python on the same ORT checkpoint and artifacts
    state = CheckpointState.load_checkpoint(ckpt)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    names = module._names(False)
    assert names[-1] == "fc2.bias" and out["size"] == [12 + 3 + 6, 12 + 3 + 6 + 2]
    ort_weights = np.concatenate([expected["param/" + n].ravel() for n in names])
    np.testing.assert_array_equal(np.array(out["loaded"], np.float32), ort_weights)
    loss = float(np.asarray(module(x, y)).ravel()[0])
    opt.step()
    assert state.optimizer_state.step == 3   # ORT's two steps, then this one
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-6)
    np.testing.assert_allclose(np.array(out["stepped"], np.float32), module.get_contiguous_parameters(False),
                               rtol=1e-6, atol=1e-7)
    assert rec.foreign(site_url) == []
