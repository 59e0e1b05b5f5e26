"""Artifacts ONNX Runtime 1.19.2's own ``generate_artifacts`` made (tests/compat/fixtures/ort_made_models:
an MLP and a CNN with BatchNorm, AdamW) train in a tab through web/pytrain-ort.js as onnxruntime-web
takes them (``TrainingSession.create`` with the four files as URLs or as bytes), with the losses,
eval loss and parameters ``pytrain.ort`` gives in Python on the same batches."""
from __future__ import annotations

import json

import numpy as np
import pytest

from browser_helpers import LOAD_TIMEOUT_MS, open_app, serve_files

from pytrain.ort.api import CheckpointState, Module, Optimizer
from build import ROOT

FIXTURES = ROOT / "tests" / "compat" / "fixtures" / "ort_made_models"
ART_FILES = ("checkpoint", "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")

PAGE = """<!doctype html>
<meta charset="utf-8">
<script type="module">
import * as ort from "/pytrain-ort.js";
window.__ortMade = (async () => {
  const base = "/ort-test/";
  const get = async (u) => new Uint8Array(await (await fetch(base + u)).arrayBuffer());
  const meta = JSON.parse(new TextDecoder().decode(await get("meta.json")));
  const x = new Float32Array((await get("x.bin")).buffer);
  const y = new BigInt64Array((await get("y.bin")).buffer);
  // as onnxruntime-web's TrainingSession.create takes them: URLs, or the files' bytes
  const src = async (f) => (meta.asBytes ? get(f) : base + f);
  const session = await ort.TrainingSession.create({
    checkpointState: await src("checkpoint"), trainModel: await src("training_model.onnx"),
    evalModel: await src("eval_model.onnx"), optimizerModel: await src("optimizer_model.onnx") });
  const [steps, ...xdims] = meta.xdims;
  const [, ...ydims] = meta.ydims;
  const xsize = xdims.reduce((a, b) => a * b, 1), ysize = ydims.reduce((a, b) => a * b, 1);
  const [xName, yName] = session.trainingInputNames;
  const feeds = (i) => ({ [xName]: new ort.Tensor("float32", x.slice(i * xsize, (i + 1) * xsize), xdims),
                          [yName]: new ort.Tensor("int64", y.slice(i * ysize, (i + 1) * ysize), ydims) });
  const out = { names: [session.trainingInputNames, session.trainingOutputNames, session.evalInputNames,
                        session.evalOutputNames], losses: [] };
  for (let i = 0; i < steps; i++) {
    const r = await session.runTrainStep(feeds(i));
    const loss = r[session.trainingOutputNames[0]];
    out.losses.push(loss.data[0]);
    out.lossDims = loss.dims;
    await session.runOptimizerStep();
    await session.lazyResetGrad();
  }
  out.evalLoss = (await session.runEvalStep(feeds(steps - 1)))[session.evalOutputNames[0]].data[0];
  out.params = Array.from((await session.getContiguousParameters(true)).data);
  await session.release();
  return out;
})().catch((e) => ({ failed: String((e && e.stack) || e) })).then((r) => { window.__ortMadeResult = r; });
</script>
"""


def _python(d, xs, ys):
    """pytrain.ort in Python on ORT's artifacts, with ORT's defaults (learning rate 1e-3), as the tab trains."""
    state = CheckpointState.load_checkpoint(str(d / "checkpoint"))
    module = Module(str(d / "training_model.onnx"), state, str(d / "eval_model.onnx"))
    optimizer = Optimizer(str(d / "optimizer_model.onnx"), module)
    names = [module.input_names(), module.output_names()]
    initial = _flat(module)
    losses = []
    for x, y in zip(xs, ys):
        losses.append(np.asarray(module(x, y)))
        optimizer.step()
        module.lazy_reset_grad()
    module.eval()
    names += [module.input_names(), module.output_names()]
    eval_loss = float(np.asarray(module(xs[-1], ys[-1])).reshape(()))
    return names, losses, eval_loss, initial, _flat(module)


def _flat(module):
    """The trainable parameters as one float32 array (an OrtValue's copied while it lives)."""
    value = module.get_contiguous_parameters(trainable_only=True)
    return np.array(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float32)


@pytest.mark.parametrize("case, as_bytes", [("mlp_adamw", False), ("cnn_adamw", True)])
def test_ort_made_artifacts_train_in_the_tab_as_in_pytrain_ort(context, site_url, case, as_bytes):
    ctx, rec = context
    d = FIXTURES / case
    steps = np.load(str(d / "steps.npz"))
    xs, ys = steps["x"].astype(np.float32), steps["y"].astype(np.int64)
    files = {"/ort-test/ort_made.html": PAGE.encode(), "/ort-test/x.bin": xs.tobytes(),
             "/ort-test/y.bin": ys.tobytes(),
             "/ort-test/meta.json": json.dumps({"xdims": list(xs.shape), "ydims": list(ys.shape),
                                                "asBytes": as_bytes}).encode()}
    for fname in ART_FILES:
        files["/ort-test/" + fname] = (d / fname).read_bytes()
    serve_files(ctx, files)
    page = open_app(ctx, site_url, rec, "ort-test/ort_made.html")
    page.wait_for_function("() => window.__ortMadeResult !== undefined", timeout=LOAD_TIMEOUT_MS + 120_000)
    out = page.evaluate("window.__ortMadeResult")
    assert "failed" not in out, out.get("failed")

    names, losses, eval_loss, initial, params = _python(d, xs, ys)
    assert out["names"] == names
    assert out["lossDims"] == list(losses[0].shape) == []   # ORT's scalar loss, as onnxruntime-web gives it
    want = np.array([float(v) for v in losses])
    np.testing.assert_allclose(out["losses"], want, rtol=1e-6)
    np.testing.assert_allclose(out["evalLoss"], eval_loss, rtol=1e-6)
    # Adam divides by sqrt(v): a weight whose gradient is near 0 moves by the kernels' float32 rounding
    # (the tab's wasm kernels, numpy natively) over the 10 steps, each at most lr = 1e-3: 1e-6 absolute
    np.testing.assert_allclose(np.array(out["params"], np.float32), params, rtol=1e-6, atol=1e-6)
    assert np.abs(params - initial).max() > 1e-3   # it trained: 10 AdamW steps of lr 1e-3 moved the weights
    assert rec.foreign(site_url) == []
