"""The page's side of the run file (the format: :mod:`pytrain.run.runfile`): one file for a whole run.

The run file is a zip of the four artifacts under the names ``pytrain train`` reads from an
artifact directory (:data:`pytrain.base.layout.ARTIFACT_FILES`), the checkpoint carrying the properties the
CLI needs to ``--resume`` it (progress, loss, outputs, settings, text classes), plus, for the page,
``pytrain-run.json`` (model description and data choice) and ``data.csv`` when the run trains on a
table. Unzipped into a folder it is an artifact directory: ``pytrain train DIR --data DIR/data.csv
--label COL --resume`` continues it, and the page and the widget take the zip back as it is.

**A table the page prepared** (missing values filled or dropped, columns left out, text columns
one-hot encoded, features standardised, regression targets scaled) resumes in the CLI with the
same numbers. How, and why this way:

- ``data.csv`` is the table *as the model sees it*: the rows the page kept, in their order, one
  column per model input (``color=red`` 0/1 columns, filled means written out), the label column
  last, comma-separated, every number written so it reads back to the same float32. The other way,
  teaching the CLI the page's preprocessing options and re-running them on the original file,
  would couple the two to every detail of ``load_csv``'s text handling (separator sniffing, mean
  fill over all rows, one-hot categories read from the file at hand) and would go wrong silently
  on any other file; a plain numeric table needs no option at all, and the exported model takes
  exactly these rows. The original file stays in the page's own saved state; ``pytrain-run.json``
  records what was done to it (``data_source.prepared``).
- Standardisation the page builds into the graph (its MLPs) travels in the artifacts as it is.
  Standardisation the page applies outside the graph (an uploaded model) becomes the checkpoint's
  ``pytrain.standardizer`` with ``--standardize`` recorded in the run's settings, which the CLI
  applies on ``--resume`` and ``pytrain export`` builds in. Target scaling becomes
  ``pytrain.target_scaling``: the CLI trains on scaled targets, reports metrics and exports in the
  target's units.
- Before writing, :func:`run_file` reads ``data.csv`` back through the CLI's own
  :func:`pytrain.run.dataset.prepare_data` (and through the page's loader, for taking the zip back) and compares every
  training and validation tensor with the page's, bit for bit; the CLI's data digest is recorded,
  so ``--resume`` with other data is refused. What the CLI cannot reproduce (samples added in the
  page, a split seed other than the shuffle seed, a loss whose targets the CLI reads otherwise, a
  table that would not read back the same) is never written as a different run: the zip keeps the
  table as uploaded, so the page and the widget still take it back, and its checkpoint records
  why (``pytrain.no_resume``), which ``pytrain train --resume`` reports as its error.

**A "Your text" run** carries its ``tokenizer.json`` and its text as uploaded (``text.txt`` or
``text.csv``, :data:`TEXT_FILES`), not the ids: the page encodes them again with the run's block size,
columns and classes (:func:`pytrain.webapp.text_source.use_run_file`), as ``pytrain train DIR --text
DIR/text.txt --tokenizer DIR/tokenizer.json --resume`` does, both through :mod:`pytrain.run.text`; before
writing, the CLI's encoding is checked to give the page's ids and split, and its digest recorded.

**Examples and a pretrained backbone** ("By example"): a run on samples the page decoded carries
them as ``examples.npy`` / ``labels.npy`` (all samples in the order given, split again with the
run's seed) and ``added_examples.npy`` / ``added_labels.npy``, so the page and the widget continue
it with its data. With a backbone, ``backbone.onnx`` is the frozen extractor the head trains on
(weights inline, recognised by its mark, see :mod:`pytrain.webapp.feature_head`) and
``features.npy`` its features of those samples as the run computed them (computed again in other
batches they may differ in the last bits, and the continued run with them), so the run continues
bit for bit; the CLI cannot continue such a run, and its checkpoint says why. Whenever the checkpoint records
``pytrain.no_resume``, the zip's comment repeats it (:data:`NO_RESUME_COMMENT`), so the page can say
so next to the download without opening the checkpoint.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any, Dict, Optional, Tuple

import numpy as np

from pytrain.errors import PytrainError
from pytrain.run import properties as P
from pytrain.run import scaling
from pytrain.base.layout import ARTIFACT_FILES
from pytrain.run.artifact_dir import ArtifactDir
from pytrain.run.dataset import DataRequest, digest, prepare_data
from pytrain.run.runfile import (BACKBONE_ONNX, DATA_CSV, EXAMPLE_FILES, TEXT_FILES, cli_properties, example_members,
                                 write_run)
from pytrain.run.text import KINDS as TEXT_KINDS, TextRequest, prepare_text
from pytrain.webapp import feature_head
from pytrain.webapp.common import WebappError
from pytrain.webapp.data_source import VAL_FRACTION


def _examples(session: Any) -> Dict[str, bytes]:
    """The members holding a run's decoded samples (see :data:`EXAMPLE_FILES`)."""
    arrays: Dict[str, np.ndarray] = dict(session.source.samples() or {})
    if session.backbone is not None and arrays:
        # The features the head trains on, exactly: recomputed elsewhere in other batches they could
        # differ in the last bits (the backbone's sums in another order), and so would the run.
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        arrays["features"] = session.backbone.features(session.shape_x(rows))
    return example_members(arrays)


def run_file(session: Any, epochs: Optional[int] = None, history: Optional[Dict[str, Any]] = None) -> bytes:
    """The zip of ``session``'s run (see the module docstring): what ``Session.run_file`` returns; the
    plots' ``history`` ({losses, epochs}, as the page keeps it) goes back into the plots when it is taken back."""
    session.need_model()
    session.run.save_progress()
    d, src = session.source.data or {}, session.source.source or {}
    settings: Dict[str, Any] = {
        "epochs": int(epochs or max(1, session.run.at.epoch)), "batch_size": session.run.batch_size, "lr": session.run.lr,
        "scheduler": "none", "warmup": 0, "seed": session.run.seed, "standardize": False,
        "validation_split": src.get("val_fraction") if src.get("kind") in ("csv",) + TEXT_KINDS else None}
    if d:
        settings["samples"] = int(len(d["train_x"]))
    props = session.run.state.properties
    cli_properties(props, session.model.get("loss", ""), session.model["output"], settings, d.get("text_classes"))
    props.pop(P.P_NO_RESUME, None)
    if d.get("columns"):   # the rows as typed, which the page's and the CLI's exports take
        props[P.P_ROWS] = json.dumps(d["columns"])
    else:
        props.pop(P.P_ROWS, None)
    meta = {"model": session.model, "data_source": src, "classes": d.get("classes"),
            "epoch": session.run.at.epoch, "step": session.run.at.step, "digest": session.digest(), "history": history}
    csv_text = None
    extra: Dict[str, bytes] = _examples(session) if src.get("kind") == "arrays" else {}
    if session.backbone is not None:   # the page takes it back with its backbone; the CLI cannot run it
        extra[BACKBONE_ONNX] = feature_head.marked(session.artifacts[feature_head.ARTIFACT_KEY])
        props[P.P_NO_RESUME] = feature_head.NO_CLI_RESUME
    elif src.get("kind") in TEXT_KINDS:   # its tokenizer and text: the page encodes them again, as does the CLI
        extra.update(_text_members(session, settings))
    elif src.get("kind") == "csv":
        try:
            csv_text, meta["data_source"] = _model_table(session, settings)
        except PytrainError as e:   # NotForCli, or the table failing to load again
            # Still one file the page and the widget take back (with the table as it was uploaded);
            # `pytrain train --resume` refuses it, saying why, rather than continue another run.
            props[P.P_NO_RESUME] = str(e)
            props[P.P_TRAIN] = json.dumps(settings)
            csv_text = session.source.csv_text
    return write_run(session.artifacts, session.checkpoint(), meta, csv_text, extra, props.get(P.P_NO_RESUME))


def use_examples(session: Any, arrays: Dict[str, np.ndarray], run: Dict[str, Any],
                 backbone: Optional[bytes] = None) -> Dict[str, Any]:
    """Load a run file's examples (from :func:`pytrain.run.runfile.sort_files`) into ``session`` as the run had them:
    the same split (from the run's seed and validation fraction), then the samples added to it;
    with a ``backbone`` (the run file's extractor), its features of them as the run computed them
    (kept by the session's next model, the run's head: see :func:`feature_head.attach`)."""
    src = run.get("data_source") or {}
    if "x" not in arrays or "y" not in arrays:
        raise WebappError("the run file holds %s without %s" % (
            ", ".join(sorted(m for m, k in EXAMPLE_FILES.items() if k in arrays)),
            " and ".join(m for m, k in EXAMPLE_FILES.items() if k in ("x", "y") and k not in arrays)))
    task = src.get("task") or "classification"
    summary = session.use_arrays(arrays["x"], arrays["y"], task, run.get("classes"),
                                 float(src.get("val_fraction", VAL_FRACTION)), int(src.get("seed", 0)))
    if "added_x" in arrays and "added_y" in arrays:
        summary = session.add_samples(arrays["added_x"], arrays["added_y"])
    if backbone is not None:
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        info = (run.get("model") or {}).get("backbone") or {}
        session.backbone = feature_head.with_features(backbone, info, rows, arrays.get("features"))
    return summary


def _text_members(session: Any, settings: Dict[str, Any]) -> Dict[str, bytes]:
    """The tokenizer.json and the text file or CSV of a "Your text" run (:data:`TEXT_FILES`), checked to encode in
    ``pytrain train --resume`` to the ids the page trains on (else the checkpoint records why it cannot)."""
    from pytrain.webapp.text_source import kept_text

    d, src, props = session.source.data, session.source.source, session.run.state.properties
    tok, body = kept_text(session)
    kind = src["kind"]
    names = {v: k for k, v in TEXT_FILES.items()}
    settings["block_size"] = int(session.model["text"]["block_size"])
    if d.get("classes"):
        props[P.P_CLASSES] = json.dumps(list(d["classes"]))
    props[P.P_TRAIN] = json.dumps(settings)
    try:
        if int(src.get("seed", 0)) != int(session.run.seed):
            raise NotForCli("the validation split used seed %s and the shuffling seed %s; the CLI uses one seed for "
                            "both" % (src.get("seed", 0), session.run.seed))
        art = ArtifactDir.from_bytes({ARTIFACT_FILES[k]: session.artifacts.get(k, b"")
                                      for k in ("training", "eval", "optimizer", "checkpoint")}, "the page's artifacts")
        req = TextRequest(**{kind: body.encode("utf-8")}, tokenizer=tok, block_size=settings["block_size"],
                          text_column=src.get("text_column"), label_column=src.get("label_column"))
        got = prepare_text(req, art, session.run.state, settings, d.get("classes"))
        val = got.val.x if got.val is not None else got.train.x[:0]
        if not (_same(got.train.x, d["train_x"]) and _same(got.train.y, d["train_y"]) and _same(val, d["val_x"])):
            raise NotForCli("the CLI would encode other ids from the text than the page trains on")
        settings["data_digest"] = digest(got.train.x, got.train.y)
        props[P.P_TRAIN] = json.dumps(settings)
    except PytrainError as e:
        props[P.P_NO_RESUME] = str(e)
    return {names["tokenizer"]: tok, names[kind]: body.encode("utf-8")}


class NotForCli(WebappError):
    """What ``pytrain train --resume`` could not continue exactly (recorded in the run file)."""


def _cell(v: Any) -> str:
    """A float32 as short text that reads back (text -> float64 -> float32, as load_csv reads) to it."""
    f = np.float32(v)
    short = str(f)
    if np.float32(float(short)) == f:
        return short[:-2] if short.endswith(".0") else short
    return repr(float(f))   # exact in float64, so exact in float32


def _cells(a: np.ndarray) -> np.ndarray:
    """``a`` (2-D float32) as an object array of :func:`_cell` texts, each distinct value formatted once
    (tables repeat values: one-hot 0/1, filled means, small integers)."""
    uniq, inverse = np.unique(a.reshape(-1), return_inverse=True)
    texts = np.array([_cell(v) for v in uniq] or [""], dtype=object)
    return texts[inverse.reshape(-1)].reshape(a.shape)


def _record_scaling(session: Any, inp: Any, settings: Dict[str, Any]) -> None:
    """Scaling the page applies outside the graph, as the checkpoint properties the CLI reads."""
    props, sc = session.run.state.properties, session.model.get("scaling") or {}
    if "x_mean" in sc:
        props[P.P_STANDARDIZER] = scaling.standardizer(sc, inp.sample_shape()).to_json()
        settings["standardize"] = True
    else:
        props.pop(P.P_STANDARDIZER, None)
    if "y_mean" in sc:
        props[P.P_TARGET_SCALING] = scaling.TargetScaling(sc["y_mean"], sc["y_std"], session.model["output"]).to_json()
    else:
        props.pop(P.P_TARGET_SCALING, None)
    props[P.P_TRAIN] = json.dumps(settings)


def _model_table(session: Any, settings: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """(data.csv text, data_source for pytrain-run.json): the table as the model sees it, checked to
    load in ``pytrain train --resume`` and in the page exactly as this session has it; records the
    scaling and the data digest in the checkpoint properties the CLI reads. Raises
    :class:`NotForCli` saying what the CLI could not reproduce."""
    from pytrain import data as _data

    d, src, model = session.source.data, session.source.source, session.model
    props = session.run.state.properties
    art = ArtifactDir.from_bytes({ARTIFACT_FILES[k]: session.artifacts.get(k, b"")
                                  for k in ("training", "eval", "optimizer", "checkpoint")}, "the page's artifacts")
    data_inputs, label_spec = art.inputs(session.run.state)
    if len(data_inputs) != 1:
        raise NotForCli("the model takes %d data inputs; the CLI trains models with one" % len(data_inputs))
    inp = data_inputs[0]
    _record_scaling(session, inp, settings)
    task = art.task(session.run.state)
    if task != d["task"]:
        raise NotForCli("the page trains %s on this table with %s, but the CLI reads a %s loss's targets as %s"
                        % (d["task"], model.get("loss"), art.loss_kind(session.run.state),
                           "class ids" if task == "classification" else "float values of the label column"))
    if session.source.added:
        raise NotForCli("%d sample(s) were added to the table in the page; data.csv cannot place them where "
                        "the run has them" % sum(len(y) for _, y in session.source.added))
    if int(src.get("seed", 0)) != int(session.run.seed):
        raise NotForCli("the validation split used seed %s and the shuffling seed %s; the CLI uses one seed for "
                        "both" % (src.get("seed", 0), session.run.seed))
    # The full table in its original row order, exactly as use_csv read it (the split is re-made from it).
    ds = _data.load_csv(str(session.source.csv_text), label=src["label"], task=src.get("task") or None,
                        name="the CSV file", delimiter=None,
                        drop=[c for c in src.get("exclude", ()) if c != src["label"]],
                        missing=src.get("missing", "error"), onehot=bool(src.get("onehot", False)))
    names = list(ds.feature_names or ["f%d" % i for i in range(ds.x.shape[1])])
    label = str(src["label"])
    if ds.y.ndim != 1:
        raise NotForCli("the label has %d columns; the run file's table carries one" % ds.y.shape[1])
    clash = sorted({n for n in names if names.count(n) > 1 or n == label})
    if clash:
        raise NotForCli("the prepared table would repeat the column name(s) %s (a one-hot column named like "
                        "another column); rename the column in the CSV file" % ", ".join(repr(c) for c in clash))
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(names + [label])
    flat = ds.x.reshape(len(ds.x), -1)
    if ds.task == "classification":
        labels = [ds.classes[int(i)] if ds.classes else str(int(i)) for i in ds.y.tolist()]
    else:
        labels = _cells(ds.y.reshape(-1, 1))[:, 0].tolist()
    cells = _cells(flat).tolist()
    for row, lab in zip(cells, labels):
        row.append(lab)
    w.writerows(cells)
    text = out.getvalue()

    # Read data.csv back as `pytrain train DIR --data DIR/data.csv --label COL --resume` will.
    req = DataRequest(data=text.encode("utf-8"), label=label, resume=True)
    try:
        train, val, _, _ = prepare_data(req, art, session.run.state, settings, inp, label_spec, task)
    except PytrainError as e:
        raise NotForCli("its data.csv does not load in the CLI (%s)" % e) from None
    cli_val = (val.x, val.y) if val is not None else (train.x[:0], train.y[:0])
    for what, a, b in (("training features", session.model_x(d["train_x"]), train.x),
                       ("training targets", session.targets(d["train_y"]), train.y),
                       ("validation features", session.model_x(d["val_x"]), cli_val[0]),
                       ("validation targets", d["val_y"], cli_val[1])):
        if not _same(a, b):
            raise NotForCli("the CLI would read other %s from data.csv than the page trains on" % what)
    settings["data_digest"] = digest(train.x, train.y)
    props[P.P_TRAIN] = json.dumps(settings)

    # ...and as the page (or the widget) takes the zip back: the same table, no options needed.
    back = _data.load_csv(text, label=label, task=ds.task, name=DATA_CSV, delimiter=None)
    if not (_same(back.x, ds.x) and _same(back.y, ds.y) and back.classes == ds.classes):
        raise NotForCli("the page would read data.csv back differently")
    prepared = {k: src.get(k) for k in ("exclude", "missing", "onehot")}
    prepared["notes"] = list(d.get("notes") or [])
    out_src = dict(src)
    out_src.update({"task": ds.task, "exclude": [], "missing": "error", "onehot": False, "prepared": prepared})
    return text, out_src


def _same(a: Any, b: Any) -> bool:
    """Equal values, dtype kind and sample count (shapes may differ by a reshape, as the CLI's)."""
    a, b = np.asarray(a), np.asarray(b)
    if len(a) != len(b) or a.size != b.size or a.dtype.kind != b.dtype.kind:
        return False
    return bool(np.array_equal(a.reshape(len(a), -1), b.reshape(len(b), -1)))
