"""Artifacts ONNX Runtime 1.19.2's own ``generate_artifacts`` made (every case folder of
tests/compat/fixtures/ort_made_models, found there: a case added to it is covered without a change
here) train in a tab through web/pytrain-ort.js as onnxruntime-web takes them (``TrainingSession.create``
with the four files as URLs or as bytes), with the losses, eval loss and parameters ``pytrain.ort``
gives in Python on the same batches. One page and its one worker train the cases one after another."""
from __future__ import annotations

import json

import numpy as np
from ort_made_fixtures import batch_inputs

from browser_helpers import LOAD_TIMEOUT_MS, open_app, serve_files, wait_ms

from pytrain.ort.api import CheckpointState, Module, Optimizer
from build import ROOT

FIXTURES = ROOT / "tests" / "compat" / "fixtures" / "ort_made_models"
ART_FILES = ("checkpoint", "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")
#: a quiet 2-core machine's budget for one case's 10 steps in the tab (MobileNetV2's are the slowest)
CASE_BUDGET_MS = 10_000
#: the learning rate of ORT's fresh optimizer, which the tab (onnxruntime-web has no setter) and Python keep
LR = 1e-3

PAGE = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import * as ort from "/pytrain-ort.js";
const ARRAYS = { float32: Float32Array, int64: BigInt64Array };
async function get(u) { return new Uint8Array(await (await fetch("/ort-test/" + u)).arrayBuffer()); }

async function train(c) {
  const base = c.name + "/";
  const xs = [];
  for (const x of c.inputs) xs.push(new ARRAYS[x.type]((await get(base + x.file)).buffer));
  const y = new BigInt64Array((await get(base + "y.bin")).buffer);
  // as onnxruntime-web's TrainingSession.create takes them: URLs, or the files' bytes
  const src = async (f) => (c.asBytes ? get(base + f) : "/ort-test/" + base + f);
  const session = await ort.TrainingSession.create({
    checkpointState: await src("checkpoint"), trainModel: await src("training_model.onnx"),
    evalModel: await src("eval_model.onnx"), optimizerModel: await src("optimizer_model.onnx") });
  const names = session.trainingInputNames;
  const batch = (data, type, [, ...dims], i) => {
    const size = dims.reduce((a, b) => a * b, 1);
    return new ort.Tensor(type, data.slice(i * size, (i + 1) * size), dims);
  };
  const feeds = (i) => Object.fromEntries([
    ...c.inputs.map((x, k) => [names[k], batch(xs[k], x.type, x.dims, i)]),
    [names[c.inputs.length], batch(y, "int64", c.ydims, i)]]);
  const out = { names: [session.trainingInputNames, session.trainingOutputNames, session.evalInputNames,
                        session.evalOutputNames], losses: [] };
  for (let i = 0; i < c.steps; i++) {
    const r = await session.runTrainStep(feeds(i));
    const loss = r[session.trainingOutputNames[0]];
    out.losses.push(loss.data[0]);
    out.lossDims = loss.dims;
    await session.runOptimizerStep();
    await session.lazyResetGrad();
  }
  out.evalLoss = (await session.runEvalStep(feeds(c.steps - 1)))[session.evalOutputNames[0]].data[0];
  out.params = Array.from((await session.getContiguousParameters(true)).data);
  await session.release();
  return out;
}

window.__ortMade = (async () => {
  const cases = JSON.parse(new TextDecoder().decode(await get("cases.json")));
  const results = {};
  for (const c of cases) {   // one after another, in the page's one worker
    results[c.name] = await train(c).catch((e) => ({ failed: String((e && e.stack) || e) }));
  }
  return results;
})().catch((e) => ({ failed: String((e && e.stack) || e) })).then((r) => { window.__ortMadeResult = r; });
</script>
"""


def _cases():
    """Every case folder of the fixtures (ORT's four files and its steps.npz), by name."""
    return sorted(d.name for d in FIXTURES.iterdir() if (d / "steps.npz").is_file())


def _batches(d):
    """(inputs, labels) of a case's steps.npz."""
    steps = np.load(str(d / "steps.npz"))
    return batch_inputs(steps), steps["y"].astype(np.int64)


def _python(d, xs, ys):
    """pytrain.ort in Python on ORT's artifacts, with ORT's defaults (learning rate LR), as the tab trains."""
    state = CheckpointState.load_checkpoint(str(d / "checkpoint"))
    module = Module(str(d / "training_model.onnx"), state, str(d / "eval_model.onnx"))
    optimizer = Optimizer(str(d / "optimizer_model.onnx"), module)
    names = [module.input_names(), module.output_names()]
    initial = _flat(module)
    losses = []
    for step, y in enumerate(ys):
        losses.append(np.asarray(module(*[x[step] for x in xs], y)))
        optimizer.step()
        module.lazy_reset_grad()
    module.eval()
    names += [module.input_names(), module.output_names()]
    eval_loss = float(np.asarray(module(*[x[-1] for x in xs], ys[-1])).reshape(()))
    return names, losses, eval_loss, initial, _flat(module)


def _flat(module):
    """The trainable parameters as one float32 array (an OrtValue's copied while it lives)."""
    value = module.get_contiguous_parameters(trainable_only=True)
    return np.array(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float32)


def _check(case, out, xs, ys):
    """The tab's results for ``case`` against pytrain.ort's in Python."""
    assert "failed" not in out, out.get("failed")
    names, losses, eval_loss, initial, params = _python(FIXTURES / case, xs, ys)
    assert out["names"] == names
    assert out["lossDims"] == list(losses[0].shape) == []   # ORT's scalar loss, as onnxruntime-web gives it
    want = np.array([float(v) for v in losses])
    np.testing.assert_allclose(out["losses"], want, rtol=1e-6)
    np.testing.assert_allclose(out["evalLoss"], eval_loss, rtol=1e-6)
    # each weight within 1% of one step (an AdamW step moves it by at most LR): Adam's m / sqrt(v)
    # carries the kernels' float32 rounding (the tab's wasm numpy, native numpy here: sums in other
    # orders) to a weight whose gradients' signs cancel in m (MobileNetV2's classifier: 1.1e-6 of a 5.5e-3 move)
    np.testing.assert_allclose(np.array(out["params"], np.float32), params, rtol=1e-6, atol=1e-2 * LR)
    assert np.abs(params - initial).max() > LR   # it trained: 10 optimizer steps of LR moved the weights


def test_ort_made_artifacts_train_in_the_tab_as_in_pytrain_ort(context, site_url):
    ctx, rec = context
    cases = _cases()
    assert {"mlp_adamw", "cnn_adamw"} <= set(cases)
    files = {"/ort-test/ort_made.html": PAGE.encode()}
    manifest, batches = [], {}
    for i, case in enumerate(cases):
        d = FIXTURES / case
        xs, ys = batches[case] = _batches(d)
        inputs = []
        for k, x in enumerate(xs):
            files["/ort-test/%s/x%d.bin" % (case, k)] = x.tobytes()
            inputs.append({"file": "x%d.bin" % k, "type": x.dtype.name, "dims": list(x.shape)})  # the page's ARRAYS
        files["/ort-test/%s/y.bin" % case] = ys.tobytes()
        # every other case's files as bytes, the others as URLs: both ways onnxruntime-web takes them
        manifest.append({"name": case, "inputs": inputs, "ydims": list(ys.shape), "steps": len(ys),
                         "asBytes": i % 2 == 1})
        for fname in ART_FILES:
            files["/ort-test/%s/%s" % (case, fname)] = (d / fname).read_bytes()
    files["/ort-test/cases.json"] = json.dumps(manifest).encode()
    serve_files(ctx, files)
    page = open_app(ctx, site_url, rec, "ort-test/ort_made.html")
    page.wait_for_function("() => window.__ortMadeResult !== undefined",
                           timeout=LOAD_TIMEOUT_MS + wait_ms(CASE_BUDGET_MS * len(cases)))
    results = page.evaluate("window.__ortMadeResult")
    assert "failed" not in results, results.get("failed")
    assert sorted(results) == cases
    wrong = {}
    for case in cases:
        try:
            _check(case, results[case], *batches[case])
        except AssertionError as e:
            wrong[case] = str(e)
    assert wrong == {}
    assert rec.foreign(site_url) == []
