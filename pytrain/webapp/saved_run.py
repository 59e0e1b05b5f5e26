"""A run saved and taken back: the page's snapshot for IndexedDB (:func:`snapshot`, :func:`restore`)
and uploaded artifacts or a run file (:func:`use_artifact_files`), for a :class:`~pytrain.webapp.session.Session`."""
from __future__ import annotations

import json
from typing import Any, Dict, Optional

import numpy as np

from pytrain.run import properties as P
from pytrain.run.loop import Position
from pytrain.run.runfile import RunFileError, sort_files
from pytrain.webapp import feature_head, runfile
from pytrain.webapp.common import WebappError, core_api
from pytrain.webapp.data_source import pack_arrays, unpack_arrays


def snapshot(session: Any, data_version: int = -1, artifacts_version: int = -1) -> Dict[str, Any]:
    """Everything needed to resume this run; data/artifacts only when newer than the given versions."""
    session._need_model()
    session._need_data()
    meta = {"model": session.model, "data_source": session.data_source, "epoch": session.epoch,
            "epoch_step": session.epoch_step, "step": session.step, "batch_size": session.batch_size,
            "lr": session.lr, "seed": session.seed, "data_version": session.data_version,
            "artifacts_version": session.artifacts_version, "digest": session.digest(),
            "classes": session.data.get("classes"),
            "epoch_n": session._epoch_n if session._epoch_n_for == session.epoch else None}
    out: Dict[str, Any] = {"meta": meta, "checkpoint": session.checkpoint()}
    if int(artifacts_version) != session.artifacts_version:
        out["artifacts"] = dict(session.artifacts)
    if int(data_version) != session.data_version:
        out["data"] = data_blob(session)
    return out


def data_blob(session: Any) -> bytes:
    """The data a resume cannot fetch again: CSV text, decoded samples, added samples."""
    arrays = session.source.saved()
    if session.backbone is not None and "x" in arrays:
        # The features the head trains on, as this run computed them: recomputed after a reload
        # in other batches they could differ in the last bits, and the resumed run with them.
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        arrays["features"] = session.backbone.features(session._shape_x(rows))
    return pack_arrays(arrays)


def restore(session: Any, meta: Dict[str, Any], artifacts: Dict[str, bytes], checkpoint: bytes,
            data: bytes = b"", digits: Optional[bytes] = None) -> Dict[str, Any]:
    """Rebuild a saved run: data, artifacts, then the checkpoint and the saved position."""
    arrays = unpack_arrays(bytes(data)) if data else {}
    if meta["data_source"].get("kind") in ("text", "text_csv"):   # "Your text": its tokenizer makes the feeds again
        from pytrain.webapp.text_source import restore_data
        restore_data(session, meta, arrays)
    else:
        session.source.load_saved(meta["data_source"], arrays, meta.get("classes"), digits)
    session._order_epoch = session._epoch_n_for = -1   # a new data set: no epoch order drawn for it yet
    arts = dict(artifacts)
    arts["checkpoint"] = bytes(checkpoint)
    session._use(arts, meta["model"])
    if session.backbone is not None and "features" in arrays and "x" in arrays:   # the features as saved
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        session.backbone = feature_head.with_features(session.backbone.blob, session.backbone.info, rows,
                                                      arrays["features"])
    session.batch_size, session.lr, session.seed = int(meta["batch_size"]), float(meta["lr"]), int(meta["seed"])
    session._apply_lr()
    session.at = Position(meta["epoch"], meta["epoch_step"], meta["step"])
    session._order_epoch = -1
    if meta.get("epoch_n"):
        session._epoch_n, session._epoch_n_for = int(meta["epoch_n"]), session.epoch
    session._remember_good()
    return {"model": session.model_summary(), "data": session.data_summary(), "digest": session.digest(),
            "epoch": session.epoch, "step": session.step, "epoch_step": session.epoch_step}


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
        data = session.use_csv(table, src["label"], src.get("task"), src.get("val_fraction", 0.2), src.get("seed", 0),
                            src.get("exclude", ()), src.get("missing", "error"), src.get("onehot", False))
        if P.P_ROWS in props:   # the table as typed before the page prepared it: the export keeps taking its rows
            session.source.data["columns"] = json.loads(str(props[P.P_ROWS]))
            data = session.data_summary()
    elif isinstance(table, dict) and src.get("kind") in ("text", "text_csv"):   # "Your text": tokenizer and text
        from pytrain.webapp.text_source import use_run_file
        data = use_run_file(session, table, run)
    elif isinstance(table, dict) and src.get("kind") == "arrays":   # examples (and a backbone) of "By example"
        data = runfile.use_examples(session, table, run, found.get(feature_head.ARTIFACT_KEY))
    if run.get("model"):
        model = session._use(found, run["model"])
    else:
        model = session.use_artifacts(found["training"], found["eval"], found["optimizer"], found["checkpoint"])
    session.at = Position(*(int(props.get(k, 0)) for k in (P.P_EPOCH, P.P_EPOCH_STEP, P.P_STEP)))
    if P.P_BATCH_SIZE in props:
        session.batch_size = int(props[P.P_BATCH_SIZE])
    if P.P_LR in props:
        session.lr = float(props[P.P_LR])
        session._apply_lr()
    session.seed = int(props.get(P.P_SEED, session.seed))
    session._order_epoch = -1
    session._remember_good()
    model.update({"epoch": session.epoch, "step": session.step})
    return {"model": model, "data": data or session.data_summary(), "files": seen, "epoch": session.epoch,
            "step": session.step, "batch_size": session.batch_size, "lr": session.lr,
            "epochs": _settings(props).get("epochs"),
            "history": run.get("history"), "data_source": src or None}


def _settings(props: Dict[str, Any]) -> Dict[str, Any]:
    """The run's training settings (checkpoint property ``pytrain.train``), or none when unreadable."""
    try:
        got = json.loads(str(props.get(P.P_TRAIN) or "{}"))
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}
