"""Run files of "By example" with a pretrained backbone: the run file (zip) carries the
frozen feature extractor (``backbone.onnx``, weights inline) and the examples, so the page and the
widget (pytrain.webapp.Session.use_artifact_files, as web/worker.js calls it) take it back at the
same step with the same predictions, and continuing it trains exactly as continuing the original;
``pytrain train --resume`` refuses it, naming why (checkpoint property ``pytrain.no_resume``, also
the zip's comment, which the page shows next to the download)."""
from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("torch")

from test_runfile_resume import _cli  # noqa: E402
from test_feature_head import _export, _images, _net  # noqa: E402

from pytrain.base import limits  # noqa: E402
from pytrain.device.api import CheckpointState  # noqa: E402
from pytrain.run import properties as A  # noqa: E402
from pytrain.errors import LimitError  # noqa: E402
from pytrain.run import runfile  # noqa: E402
from pytrain.webapp import feature_head  # noqa: E402
from pytrain.webapp.common import WebappError  # noqa: E402
from pytrain.webapp.session import Session  # noqa: E402

SIDE = 16
ARTIFACTS = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint", "pytrain-run.json"}
MEMBERS = ARTIFACTS | {"backbone.onnx", "examples.npy", "labels.npy", "features.npy"}


def _session(tmp_path, steps: int = 9) -> Session:
    """A head on a torch backbone exported with its weights in a .onnx.data file, ImageNet
    normalisation, trained ``steps`` batches (4 batches of 4 per epoch: 9 ends in the third epoch)."""
    blob, extra = _export(_net(), "dynamo-external", tmp_path)
    x, y = _images(20, seed=3)
    s = Session()
    s.use_arrays(x, y, classes=["dark", "bright"], val_fraction=0.25, seed=0)
    s.build_cnn("AdamW", backbone={"bytes": blob, "name": "bb.onnx", "extra_files": extra, "size": SIDE,
                                   "normalize": "imagenet"})
    s.configure(batch_size=4, lr=0.05)
    while s.run.at.step < steps:
        s.train_for(budget_ms=1e9, max_steps=steps - s.run.at.step)
    assert (s.run.at.epoch, s.run.at.epoch_step) == divmod(steps, 4)
    return s


def _continue(s: Session, epochs: int) -> list:
    losses = []
    while s.run.at.epoch < epochs:
        losses += s.train_for(budget_ms=1e9)["losses"]
    return losses


def _probe(seed: int = 7) -> np.ndarray:
    return np.random.RandomState(seed).rand(3, 3, SIDE, SIDE).astype(np.float32)


def test_run_file_takes_the_backbone_run_back_and_continues_it_exactly(tmp_path):
    s = _session(tmp_path)
    blob = s.run_file(epochs=4)
    z = zipfile.ZipFile(io.BytesIO(blob))
    assert set(z.namelist()) == MEMBERS
    assert z.comment.decode("utf-8") == runfile.NO_RESUME_COMMENT + feature_head.NO_CLI_RESUME
    # backbone.onnx: the extractor the head trains on, self-contained (the .onnx.data inlined), marked
    bb = onnx.load_from_string(z.read("backbone.onnx"))
    assert z.read("backbone.onnx") == s.artifacts[feature_head.ARTIFACT_KEY]
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in bb.graph.initializer)
    assert {p.key for p in bb.metadata_props} == {feature_head.MARK}
    assert [o.name for o in bb.graph.output] == [feature_head.FEATURES]
    props = CheckpointState.load_checkpoint(z.read("checkpoint")).properties
    assert props[A.P_NO_RESUME] == feature_head.NO_CLI_RESUME
    np.testing.assert_array_equal(np.load(io.BytesIO(z.read("examples.npy"))), s.source.arrays[0])
    np.testing.assert_array_equal(np.load(io.BytesIO(z.read("features.npy"))), s.backbone.features(s.source.arrays[0]))
    # the exported model (backbone + head) is a whole model, not an extractor
    assert feature_head.MARK not in {p.key for p in onnx.load_from_string(s.export()).metadata_props}

    # a fresh session (another browser, or the widget's run: option) takes the zip back
    r = Session()
    res = r.use_artifact_files({"pytrain-run-step9.zip": blob})
    assert res["step"] == s.run.at.step == 9 and (r.run.at.epoch, r.run.at.epoch_step) == (s.run.at.epoch, s.run.at.epoch_step)
    assert r.digest() == s.digest() and r.model["origin"] == "backbone" and r.backbone is not None
    assert res["data"]["kind"] == "arrays" and res["data"]["classes"] == ["dark", "bright"]
    assert res["files"]["pytrain-run-step9.zip!backbone.onnx"].startswith("backbone")
    for k in ("train_x", "train_y", "val_x", "val_y"):
        np.testing.assert_array_equal(r.source.data[k], s.source.data[k], err_msg=k)
    x = _probe()
    np.testing.assert_array_equal(np.array(r.predict(x)["outputs"]), np.array(s.predict(x)["outputs"]))
    assert r.export() == s.export()
    assert r.evaluate() == s.evaluate()

    # continuing the taken-back run trains exactly as continuing the original
    r.configure(batch_size=s.run.batch_size, lr=s.run.lr)
    theirs, ours = _continue(r, 4), _continue(s, 4)
    assert len(ours) == 7 and theirs == ours
    assert (r.run.at.step, r.digest()) == (s.run.at.step, s.digest())
    np.testing.assert_array_equal(np.array(r.predict(x)["outputs"]), np.array(s.predict(x)["outputs"]))
    # and it is saved in that browser with its backbone (IndexedDB snapshot)
    snap = r.snapshot()
    assert feature_head.ARTIFACT_KEY in snap["artifacts"] and snap["data"]
    again = Session()
    again.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    assert again.digest() == s.digest() and again.backbone is not None


def test_cli_resume_refuses_the_backbone_run_naming_why(tmp_path):
    s = _session(tmp_path)
    run_dir = tmp_path / "run"
    zipfile.ZipFile(io.BytesIO(s.run_file())).extractall(str(run_dir))
    out = _cli("train", str(run_dir), "--data", str(run_dir / "examples.npy"), "--resume", "--epochs", "4")
    assert out.returncode == 1, out.stdout
    assert "cannot continue exactly" in out.stderr and "frozen pretrained backbone" in out.stderr, out.stderr
    assert "Continue it in the page or the widget" in out.stderr, out.stderr
    assert int(CheckpointState.load_checkpoint(str(run_dir / "checkpoint")).properties["step"]) == 9


def _members(blob: bytes, drop=(), replace=None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(blob)) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as w:
        for m in z.namelist():
            if m not in drop:
                w.writestr(m, (replace or {}).get(m, z.read(m)))
    return out.getvalue()


def test_incomplete_or_odd_run_files_are_refused_clearly(tmp_path):
    s = _session(tmp_path, steps=2)
    blob = s.run_file()
    with pytest.raises(WebappError, match="backbone.onnx is not among the chosen files"):
        Session().use_artifact_files({"run.zip": _members(blob, drop=("backbone.onnx",))})
    with pytest.raises(WebappError, match="without the run description"):
        Session().use_artifact_files({"run.zip": _members(blob, drop=("pytrain-run.json",))})
    with pytest.raises(WebappError, match="labels.npy"):
        Session().use_artifact_files({"run.zip": _members(blob, drop=("labels.npy",))})
    with pytest.raises(WebappError, match="features.npy is not what its backbone.onnx computes"):
        Session().use_artifact_files({"run.zip": _members(blob, replace={"features.npy": runfile._npy(
            np.zeros((20, 6), np.float32))})})
    with pytest.raises(WebappError, match="examples.npy is not a readable .npy array"):
        Session().use_artifact_files({"run.zip": _members(blob, replace={
            "examples.npy": _npy_objects()})})
    # a member larger than the file limit is refused before it is inflated
    old = limits.max_file_bytes
    try:
        big = max(zipfile.ZipFile(io.BytesIO(blob)).infolist(), key=lambda m: m.file_size)
        limits.set_limits(max_file_bytes=big.file_size - 1)
        with pytest.raises(LimitError, match="run.zip!%s is %d bytes" % (big.filename, big.file_size)):
            Session().use_artifact_files({"run.zip": blob})
    finally:
        limits.set_limits(max_file_bytes=old)


def _npy_objects() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


def test_extractor_saved_before_the_mark_is_marked_in_the_run_file(tmp_path):
    """A run saved in the browser before extractors carried the mark still goes into a run file."""
    s = _session(tmp_path, steps=3)
    m = onnx.load_from_string(s.artifacts[feature_head.ARTIFACT_KEY])
    del m.metadata_props[:]
    s.artifacts[feature_head.ARTIFACT_KEY] = m.SerializeToString()
    blob = s.run_file()
    r = Session()
    assert r.use_artifact_files({"run.zip": blob})["step"] == 3
    x = _probe(1)
    np.testing.assert_array_equal(np.array(r.predict(x)["outputs"]), np.array(s.predict(x)["outputs"]))


def test_cnn_from_scratch_run_file_carries_its_examples(tmp_path):
    """Without a backbone, a "By example" run file also brings its examples back (and stays CLI-quiet:
    no no_resume reason is invented for it)."""
    x, y = _images(16, seed=4)
    s = Session()
    s.use_arrays(x, y, classes=["a", "b"], val_fraction=0.25)
    s.build_cnn("SGD")
    s.configure(batch_size=4)
    s.train_for(budget_ms=1e9, max_steps=2)
    blob = s.run_file()
    z = zipfile.ZipFile(io.BytesIO(blob))
    assert set(z.namelist()) == ARTIFACTS | {"examples.npy", "labels.npy"} and z.comment == b""
    assert A.P_NO_RESUME not in CheckpointState.load_checkpoint(z.read("checkpoint")).properties
    r = Session()
    assert r.use_artifact_files({"run.zip": blob})["step"] == 2 and r.digest() == s.digest()
    assert _continue(r, 2) == _continue(s, 2) and r.digest() == s.digest()


def batch_dependent_backbone(side: int, seed: int = 1) -> bytes:
    """A backbone whose features depend on the batch it runs in by construction, whatever the BLAS or
    CPU: a small CNN's outputs plus 1e-5 times their mean over the batch (ReduceMean over axis 0). Features
    recomputed in other batches differ in their low bits (as a batch-blocked GEMM's may), so only features
    that travel with the run continue it exactly."""
    from pytrain.generator import models
    from pytrain.proto import from_array, make_node

    m = models.cnn(input_shape=[3, side, side], num_classes=5, seed=seed, output_name="scores")
    g = m.graph
    g.initializer.append(from_array(np.asarray(1e-5, np.float32), "batch_weight"))
    g.node.extend([make_node("ReduceMean", ["scores"], ["batch_mean"], name="batch_mean", axes=[0], keepdims=1),
                   make_node("Mul", ["batch_mean", "batch_weight"], ["batch_term"], name="batch_term"),
                   make_node("Add", ["scores", "batch_term"], ["output"], name="with_batch_term")])
    g.output[0].name = "output"
    return models.to_bytes(m)


def test_features_travel_so_a_batch_dependent_backbone_continues_exactly(tmp_path):
    """The run file carries the features the head trained on, so a taken-back run of a backbone whose
    features depend on the batch predicts and continues bit for bit."""
    bb = batch_dependent_backbone(8)
    x = np.random.RandomState(0).rand(24, 3, 8, 8).astype(np.float32)
    y = np.arange(24) % 2
    s = Session()
    s.use_arrays(x, y, classes=["a", "b"], val_fraction=0.25)
    s.build_cnn("AdamW", backbone={"bytes": bb, "name": "bb.onnx"})
    s.configure(batch_size=4, lr=0.05)
    s.train_for(budget_ms=1e9, max_steps=3)
    blob = s.run_file()
    # recomputed in another batch, the features differ in their low bits: why they travel
    fresh = feature_head.Backbone(s.artifacts["backbone"], s.model["backbone"]).features(x[:5])
    assert not np.array_equal(fresh, s.backbone.features(x[:5]))
    r = Session()
    assert r.use_artifact_files({"run.zip": blob})["step"] == 3
    np.testing.assert_array_equal(r.backbone.features(x), s.backbone.features(x))
    for probe in (x[:5], x[7:9], _probe()[:, :, :8, :8]):
        np.testing.assert_array_equal(np.array(r.predict(probe)["outputs"]), np.array(s.predict(probe)["outputs"]))
    assert r.evaluate() == s.evaluate()
    assert _continue(r, 3) == _continue(s, 3) and r.digest() == s.digest()
