"""A run saved and taken back: the page's snapshot for IndexedDB (:func:`snapshot`, :func:`restore`)
and uploaded artifacts or a run file (:func:`use_artifact_files`), for a :class:`~pytrain.webapp.session.Session`."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional

import numpy as np

from pytrain.run import properties as P
from pytrain.run.loop import Position
from pytrain.run.runfile import RunFileError, sort_files
from pytrain.webapp import feature_head
from pytrain.webapp.common import WebappError, core_api
from pytrain.webapp.data_source import VAL_FRACTION, pack_arrays, unpack_arrays


def snapshot(session: Any, data_version: int = -1, artifacts_version: int = -1,
             checkpoint: bool = True) -> Dict[str, Any]:
    """Everything needed to resume this run; data/artifacts only when newer than the given versions; the
    checkpoint unless the worker streams it (``checkpoint`` False: Session.gpu_save)."""
    session.need_model()
    session.need_data()
    run, source = session.run, session.source
    meta = {"model": session.model, "data_source": source.source, "epoch": run.at.epoch,
            "epoch_step": run.at.epoch_step, "step": run.at.step, "batch_size": run.batch_size,
            "lr": run.lr, "seed": run.seed, "data_version": source.version,
            "artifacts_version": session.artifacts_version, "digest": session.digest(),
            "classes": source.data.get("classes"), "epoch_n": run.epoch_n()}
    out: Dict[str, Any] = {"meta": meta}
    if checkpoint:
        out["checkpoint"] = session.checkpoint()
    if int(artifacts_version) != session.artifacts_version:
        out["artifacts"] = dict(session.artifacts)
    if int(data_version) != source.version:
        out["data"] = data_blob(session)
    return out


def data_blob(session: Any) -> bytes:
    """The data a resume cannot fetch again: CSV text, decoded samples, added samples."""
    arrays = session.source.saved()
    if session.backbone is not None and "x" in arrays:
        # The features the head trains on, as this run computed them: recomputed after a reload
        # in other batches they could differ in the last bits, and the resumed run with them.
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        arrays["features"] = session.backbone.features(session.shape_x(rows))
    return pack_arrays(arrays)


def restore(session: Any, meta: Dict[str, Any], artifacts: Dict[str, bytes], checkpoint: bytes,
            data: bytes = b"", digits: Optional[bytes] = None, checkpoint_size: int = 0) -> Dict[str, Any]:
    """Rebuild a saved run: data, artifacts, then the checkpoint and the saved position. ``checkpoint_size``: the
    worker holds the checkpoint (``checkpoint`` empty) and hands it over range by range (gpu_resume.reopen): the
    model is built from its artifacts' checkpoint, then the saved parameters, position and moments come in (the
    moments up to the GPU where the optimizer state must live there only); the answer asks for the first range."""
    arrays = unpack_arrays(bytes(data)) if data else {}
    if meta["data_source"].get("kind") in ("text", "text_csv"):   # "Your text": its tokenizer makes the feeds again
        from pytrain.webapp.text_source import restore_data
        restore_data(session, meta, arrays)
    else:
        session.source.load_saved(meta["data_source"], arrays, meta.get("classes"), digits)
    session.run.new_data()   # a new data set: no epoch order drawn for it yet
    arts = dict(artifacts)
    streamed = int(checkpoint_size) > 0 and "checkpoint" in arts
    if not streamed:
        arts["checkpoint"] = bytes(checkpoint)
    session.use_model(arts, meta["model"])
    if session.backbone is not None and "features" in arrays and "x" in arrays:   # the features as saved
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        session.backbone = feature_head.with_features(session.backbone.blob, session.backbone.info, rows,
                                                      arrays["features"])
    run = session.run
    run.batch_size, run.lr, run.seed = int(meta["batch_size"]), float(meta["lr"]), int(meta["seed"])
    run.apply_lr()
    run.resume(Position(meta["epoch"], meta["epoch_step"], meta["step"]), meta.get("epoch_n"))
    if streamed:
        from pytrain.webapp import gpu_resume
        return dict(gpu_resume.reopen(session, int(checkpoint_size)), data=session.data_summary())
    run.remember_good()
    out = {"model": session.model_summary(), "data": session.data_summary(), "digest": session.digest()}
    out.update(run.position())
    return out


def use_artifact_files(session: Any, files: Dict[str, bytes]) -> Dict[str, Any]:
    """Use uploaded artifacts or a run file, recognised by content; a run continues at its step
    (and with its table, when the run file holds one)."""
    try:
        found, run, table, seen = sort_files(files)
    except RunFileError as e:   # the page's own error type, as for every refusal it shows
        raise WebappError(str(e)) from None
    missing = [k for k in ("training", "eval", "optimizer", "checkpoint") if k not in found]
    if missing:
        raise WebappError("no %s among the chosen files (%s); choose the run's .zip, or the training, eval "
                          "and optimizer models with a checkpoint"
                          % (" or ".join(missing), "; ".join("%s: %s" % kv for kv in seen.items()) or "none"))
    _, _, api = core_api()
    props = dict(api.CheckpointState.load_checkpoint(found["checkpoint"]).properties.items())
    data = None
    src = run.get("data_source") or {}
    if table is not None and src.get("kind") == "csv":
        data = session.use_csv(table, src["label"], src.get("task"), src.get("val_fraction", VAL_FRACTION), src.get("seed", 0),
                            src.get("exclude", ()), src.get("missing", "error"), src.get("onehot", False))
        if P.P_ROWS in props:   # the table as typed before the page prepared it: the export keeps taking its rows
            session.source.data["columns"] = json.loads(str(props[P.P_ROWS]))
            data = session.data_summary()
    elif isinstance(table, dict) and src.get("kind") in ("text", "text_csv"):   # "Your text": tokenizer and text
        from pytrain.webapp.text_source import use_run_file
        data = use_run_file(session, table, run)
    elif isinstance(table, dict) and src.get("kind") == "arrays":   # examples (and a backbone) of "By example"
        from pytrain.webapp import runfile   # (the text stack: not at the tab's start)
        data = runfile.use_examples(session, table, run, found.get(feature_head.ARTIFACT_KEY))
    if run.get("model"):
        model = session.use_model(found, run["model"])
    else:
        model = session.use_artifacts(found["training"], found["eval"], found["optimizer"], found["checkpoint"])
    tr = session.run
    if P.P_BATCH_SIZE in props:
        tr.batch_size = int(props[P.P_BATCH_SIZE])
    if P.P_LR in props:
        tr.lr = float(props[P.P_LR])
        tr.apply_lr()
    tr.seed = int(props.get(P.P_SEED, tr.seed))
    tr.resume(Position(*(int(props.get(k, 0)) for k in (P.P_EPOCH, P.P_EPOCH_STEP, P.P_STEP))))
    tr.remember_good()
    model.update({"epoch": tr.at.epoch, "step": tr.at.step})
    return {"model": model, "data": data or session.data_summary(), "files": seen, "epoch": tr.at.epoch,
            "step": tr.at.step, "batch_size": tr.batch_size, "lr": tr.lr,
            "epochs": _settings(props).get("epochs"),
            "history": run.get("history"), "data_source": src or None}


def _settings(props: Dict[str, Any]) -> Dict[str, Any]:
    """The run's training settings (checkpoint property ``pytrain.train``), or none when unreadable."""
    try:
        got = json.loads(str(props.get(P.P_TRAIN) or "{}"))
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}
