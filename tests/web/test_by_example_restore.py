"""Stale state in "By example": a run that comes back (resumed from the browser's
IndexedDB via Session.snapshot/restore, or taken back from its run file) gives the page its classes
and examples (Session.examples) so the gallery shows what trains, a rebuild from that gallery uses
the saved extractor as it is (feature_head.reuse), and a resumed backbone run carries the features
its head trained on, so it predicts and continues bit for bit as if there had been no reload."""
from __future__ import annotations

import numpy as np
import pytest

from pytrain.webapp import feature_head
from pytrain.webapp.common import WebappError
from pytrain.webapp.data_source import unpack_arrays as _unpack_arrays
from pytrain.webapp.session import Session
from test_runfile_backbone import _continue, batch_dependent_backbone

SIDE = 8


def _batch_dependent_backbone() -> bytes:
    return batch_dependent_backbone(SIDE)


def _examples(n: int = 24):
    x = np.random.RandomState(0).rand(n, 3, SIDE, SIDE).astype(np.float32)
    return x, np.arange(n) % 3


def _backbone_session(steps: int = 7) -> Session:
    x, y = _examples()
    s = Session()
    s.use_arrays(x, y, classes=["cat", "dog", "bird"], val_fraction=0.25, seed=0)
    s.add_samples(x[:2] * 0.5, [2, 1])   # samples added after the split train too
    s.build_cnn("AdamW", backbone={"bytes": _batch_dependent_backbone(), "name": "bb.onnx"})
    s.configure(batch_size=4, lr=0.05)
    s.train_for(budget_ms=1e9, max_steps=steps)
    return s


def _restored(s: Session) -> Session:
    snap = s.snapshot()
    r = Session()
    r.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    return r


def test_browser_resume_of_a_backbone_run_carries_its_features_and_continues_exactly():
    s = _backbone_session()
    snap = s.snapshot()
    rows = np.concatenate([s.source.arrays[0], s.source.added[0][0]])
    saved = _unpack_arrays(snap["data"])
    np.testing.assert_array_equal(saved["features"], s.backbone.features(rows))
    # recomputed in another batch the features differ in their low bits: why the save carries them
    fresh = feature_head.Backbone(s.artifacts["backbone"], s.model["backbone"]).features(rows[:5])
    assert not np.array_equal(fresh, s.backbone.features(rows[:5]))

    r = _restored(s)
    assert r.digest() == s.digest() and (r.run.at.step, r.run.at.epoch, r.run.at.epoch_step) == (s.run.at.step, s.run.at.epoch, s.run.at.epoch_step)
    np.testing.assert_array_equal(r.backbone.features(rows), s.backbone.features(rows))
    for probe in (rows[:5], rows[9:11], s.source.data["val_x"]):
        np.testing.assert_array_equal(np.array(r.predict(probe)["outputs"]), np.array(s.predict(probe)["outputs"]))
    assert r.evaluate() == s.evaluate()
    theirs, ours = _continue(r, 3), _continue(s, 3)
    assert len(ours) > 5 and theirs == ours and r.digest() == s.digest()
    # ...and resumed again from the resumed run's own save
    again = _restored(r)
    np.testing.assert_array_equal(again.backbone.features(rows), s.backbone.features(rows))
    assert again.digest() == s.digest()


def test_a_save_without_features_still_resumes_computing_them():
    """Runs saved before the features travelled: the features are computed again (close, not exact)."""
    from pytrain.webapp.data_source import pack_arrays as _pack_arrays

    s = _backbone_session()
    snap = s.snapshot()
    arrays = {k: v for k, v in _unpack_arrays(snap["data"]).items() if k != "features"}
    r = Session()
    r.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], _pack_arrays(arrays))
    assert r.digest() == s.digest()
    np.testing.assert_allclose(np.array(r.predict(s.source.data["val_x"])["outputs"]),
                               np.array(s.predict(s.source.data["val_x"])["outputs"]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["resume", "run file"])
def test_examples_come_back_for_the_gallery_and_rebuild_the_same_run(how):
    s = _backbone_session()
    r = _restored(s) if how == "resume" else Session()
    if how == "run file":
        r.use_artifact_files({"run.zip": s.run_file()})
    ex = r.examples()
    assert ex["loaded"] and ex["task"] == "classification" and ex["classes"] == ["cat", "dog", "bird"]
    x = np.frombuffer(ex["x"], np.float32).reshape(ex["shape"])
    np.testing.assert_array_equal(x, np.concatenate([s.source.arrays[0], s.source.added[0][0]]))
    assert ex["y"] == s.source.arrays[1].tolist() + [2, 1]
    assert ex["backbone"] == s.artifacts["backbone"]
    assert ex["backbone_info"]["name"] == "bb.onnx" and ex["backbone_info"]["features"] == 5

    # Build from the gallery as the page does: all examples by class, the saved extractor as it is
    order = np.argsort(np.array(ex["y"]), kind="stable")
    built = Session()
    built.use_arrays(x[order], np.array(ex["y"])[order], classes=ex["classes"])
    built.build_cnn("AdamW", backbone={"bytes": ex["backbone"], "name": "bb.onnx", "info": ex["backbone_info"]})
    assert built.model["origin"] == "backbone" and built.model["backbone"] == ex["backbone_info"]
    assert built.artifacts["backbone"] == s.artifacts["backbone"]   # not wrapped a second time
    # the same as building from the originally chosen backbone file on the same examples
    fresh = Session()
    fresh.use_arrays(x[order], np.array(ex["y"])[order], classes=ex["classes"])
    fresh.build_cnn("AdamW", backbone={"bytes": _batch_dependent_backbone(), "name": "bb.onnx"})
    assert built.digest() == fresh.digest()
    np.testing.assert_array_equal(built.backbone.features(x), fresh.backbone.features(x))
    built.configure(batch_size=4, lr=0.05)
    fresh.configure(batch_size=4, lr=0.05)
    assert _continue(built, 1) == _continue(fresh, 1) and built.digest() == fresh.digest()


def test_reuse_refuses_what_is_not_the_saved_extractor():
    s = _backbone_session(steps=1)
    info = s.model["backbone"]
    with pytest.raises(WebappError, match="not the feature extractor saved with the run"):
        feature_head.reuse(_batch_dependent_backbone(), info)        # the upload, not the extractor
    with pytest.raises(WebappError, match="gives \\[5\\] features; the run's description says 7"):
        feature_head.reuse(s.artifacts["backbone"], dict(info, features=7))
    with pytest.raises(WebappError, match="does not say what it takes"):
        feature_head.reuse(s.artifacts["backbone"], {"name": "bb.onnx"})


def test_examples_of_a_cnn_run_and_of_other_data():
    x = np.random.RandomState(1).rand(10, 3, 32, 32).astype(np.float32)
    s = Session()
    s.use_arrays(x, np.arange(10) % 2, classes=["Class 1", "Blank"])
    s.build_cnn("AdamW")
    s.train_for(budget_ms=1e9, max_steps=1)
    ex = _restored(s).examples()
    assert ex["backbone"] is None and ex["backbone_info"] is None and ex["classes"] == ["Class 1", "Blank"]
    np.testing.assert_array_equal(np.frombuffer(ex["x"], np.float32).reshape(ex["shape"]), x)
    assert Session().examples() == {"loaded": False}
    t = Session()
    t.use_csv("a,b,label\n1,2,x\n3,4,y\n5,6,x\n7,8,y\n9,1,x\n", "label")
    assert t.examples() == {"loaded": False}
