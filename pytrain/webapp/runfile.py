"""One file for a whole run, and artifacts recognised by what they hold rather than their names.

The run file is a zip of the four artifacts under the names ``pytrain train`` reads from an
artifact directory (see :mod:`pytrain.cli._artifacts`), the checkpoint carrying the properties the
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
  ``prepare_data`` (and through the page's loader, for taking the zip back) and compares every
  training and validation tensor with the page's, bit for bit; the CLI's data digest is recorded,
  so ``--resume`` with other data is refused. What the CLI cannot reproduce (samples added in the
  page, a split seed other than the shuffle seed, a loss whose targets the CLI reads otherwise, a
  table that would not read back the same) is never written as a different run: the zip keeps the
  table as uploaded, so the page and the widget still take it back, and its checkpoint records
  why (``pytrain.no_resume``), which ``pytrain train --resume`` reports as its error.

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
import zipfile
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain import limits
from pytrain import proto as _proto
from pytrain.cli import _artifacts as A
from pytrain.errors import PytrainError
from pytrain.webapp import feature_head
from pytrain.webapp.common import ARTIFACT_FILES, WebappError

RUN_JSON = "pytrain-run.json"
DATA_CSV = "data.csv"
BACKBONE_ONNX = "backbone.onnx"
#: the samples of a run on decoded examples: {member name: array name}
EXAMPLE_FILES = {"examples.npy": "x", "labels.npy": "y", "added_examples.npy": "added_x",
                 "added_labels.npy": "added_y", "features.npy": "features"}
_EXAMPLE_WHAT = {"x": "examples", "y": "example labels", "added_x": "examples", "added_y": "example labels",
                 "features": "the backbone's features of the examples"}
#: how the zip comment starts when ``pytrain train --resume`` cannot continue the run (the reason follows)
NO_RESUME_COMMENT = "pytrain.no_resume: "
LOSS_KINDS = {"CrossEntropyLoss": "ce", "MSELoss": "mse", "BCEWithLogitsLoss": "bce", "L1Loss": "l1"}
_ZIP_MAGIC = b"PK\x03\x04"
_MAX_MEMBERS = 64


def write_run(artifacts: Dict[str, bytes], checkpoint: bytes, meta: Dict[str, Any],
              csv_text: Optional[str] = None, extra: Optional[Dict[str, bytes]] = None,
              no_resume: Optional[str] = None) -> bytes:
    """The run as zip bytes (artifact files by their CLI names, run description, the table, ``extra``
    members such as the examples and the backbone); ``no_resume`` becomes the zip's comment."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for key in ("training", "eval", "optimizer"):
            z.writestr(ARTIFACT_FILES[key], bytes(artifacts[key]))
        z.writestr(ARTIFACT_FILES["checkpoint"], bytes(checkpoint))
        z.writestr(RUN_JSON, json.dumps(meta, indent=1, sort_keys=True))
        if csv_text is not None:
            z.writestr(DATA_CSV, csv_text.encode("utf-8"))
        for name, blob in (extra or {}).items():
            z.writestr(name, bytes(blob))
        if no_resume:
            z.comment = (NO_RESUME_COMMENT + no_resume).encode("utf-8")[:65535]
    return out.getvalue()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _examples(session: Any) -> Dict[str, bytes]:
    """The members holding a run's decoded samples (see :data:`EXAMPLE_FILES`)."""
    arrays: Dict[str, np.ndarray] = {}
    if session._arrays is not None:
        arrays["x"], arrays["y"] = session._arrays
    if session._added:
        arrays["added_x"] = np.concatenate([a for a, _ in session._added])
        arrays["added_y"] = np.concatenate([b for _, b in session._added])
    if session.backbone is not None and arrays:
        # The features the head trains on, exactly: recomputed elsewhere in other batches they could
        # differ in the last bits (the backbone's sums in another order), and so would the run.
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        arrays["features"] = session.backbone.features(session._shape_x(rows))
    return {member: _npy(arrays[key]) for member, key in EXAMPLE_FILES.items() if key in arrays}


def cli_properties(props: Any, loss: str, output: str, settings: Dict[str, Any],
                   classes: Optional[List[str]]) -> None:
    """Record in checkpoint properties what ``pytrain train --resume`` reads (cli/_artifacts.py)."""
    if loss in LOSS_KINDS:
        props[A.P_LOSS] = LOSS_KINDS[loss]
    props[A.P_OUTPUTS] = json.dumps([output])
    props[A.P_TRAIN] = json.dumps(settings)
    if classes:
        props[A.P_CLASSES] = json.dumps(list(classes))


def run_file(session: Any, epochs: Optional[int] = None) -> bytes:
    """The zip of ``session``'s run (see the module docstring): what ``Session.run_file`` returns."""
    session._need_model()
    session._save_progress()
    d, src = session.data or {}, session.data_source or {}
    settings: Dict[str, Any] = {
        "epochs": int(epochs or max(1, session.epoch)), "batch_size": session.batch_size, "lr": session.lr,
        "scheduler": "none", "warmup": 0, "seed": session.seed, "standardize": False,
        "validation_split": src.get("val_fraction") if src.get("kind") == "csv" else None}
    if d:
        settings["samples"] = int(len(d["train_x"]))
    props = session.state.properties
    cli_properties(props, session.model.get("loss", ""), session.model["output"], settings, d.get("text_classes"))
    props.pop(A.P_NO_RESUME, None)
    meta = {"model": session.model, "data_source": src, "classes": d.get("classes"),
            "epoch": session.epoch, "step": session.step, "digest": session.digest()}
    csv_text = None
    extra: Dict[str, bytes] = _examples(session) if src.get("kind") == "arrays" else {}
    if session.backbone is not None:   # the page takes it back with its backbone; the CLI cannot run it
        extra[BACKBONE_ONNX] = feature_head.marked(session.artifacts[feature_head.ARTIFACT_KEY])
        props[A.P_NO_RESUME] = feature_head.NO_CLI_RESUME
    elif src.get("kind") == "csv":
        try:
            csv_text, meta["data_source"] = _model_table(session, settings)
        except PytrainError as e:   # NotForCli, or the table failing to load again
            # Still one file the page and the widget take back (with the table as it was uploaded);
            # `pytrain train --resume` refuses it, saying why, rather than continue another run.
            props[A.P_NO_RESUME] = str(e)
            props[A.P_TRAIN] = json.dumps(settings)
            csv_text = session._csv_text
    return write_run(session.artifacts, session.checkpoint(), meta, csv_text, extra, props.get(A.P_NO_RESUME))


def use_examples(session: Any, arrays: Dict[str, np.ndarray], run: Dict[str, Any],
                 backbone: Optional[bytes] = None) -> Dict[str, Any]:
    """Load a run file's examples (from :func:`sort_files`) into ``session`` as the run had them:
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
                                 float(src.get("val_fraction", 0.2)), int(src.get("seed", 0)))
    if "added_x" in arrays and "added_y" in arrays:
        summary = session.add_samples(arrays["added_x"], arrays["added_y"])
    if backbone is not None:
        rows = np.concatenate([arrays["x"]] + ([arrays["added_x"]] if "added_x" in arrays else []))
        info = (run.get("model") or {}).get("backbone") or {}
        session.backbone = feature_head.with_features(backbone, info, rows, arrays.get("features"))
    return summary


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
    from pytrain import data as _data

    props, sc = session.state.properties, session.model.get("scaling") or {}
    if "x_mean" in sc:
        shape = inp.sample_shape()
        if not (shape and all(isinstance(s, int) and s > 0 for s in shape)
                and int(np.prod(shape)) == len(sc["x_mean"])):
            shape = [len(sc["x_mean"])]
        st = _data.Standardizer(np.asarray(sc["x_mean"], np.float32).reshape(shape),
                                np.asarray(sc["x_std"], np.float32).reshape(shape))
        props[A.P_STANDARDIZER] = st.to_json()
        settings["standardize"] = True
    else:
        props.pop(A.P_STANDARDIZER, None)
    if "y_mean" in sc:
        props[A.P_TARGET_SCALING] = A.TargetScaling(sc["y_mean"], sc["y_std"], session.model["output"]).to_json()
    else:
        props.pop(A.P_TARGET_SCALING, None)
    props[A.P_TRAIN] = json.dumps(settings)


def _model_table(session: Any, settings: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """(data.csv text, data_source for pytrain-run.json): the table as the model sees it, checked to
    load in ``pytrain train --resume`` and in the page exactly as this session has it; records the
    scaling and the data digest in the checkpoint properties the CLI reads. Raises
    :class:`NotForCli` saying what the CLI could not reproduce."""
    import argparse

    from pytrain import data as _data
    from pytrain.cli import train as _train

    d, src, model = session.data, session.data_source, session.model
    props = session.state.properties
    art = A.ArtifactDir.from_bytes({A.TRAINING: session.artifacts["training"], A.EVAL: session.artifacts["eval"],
                                    A.OPTIMIZER: session.artifacts["optimizer"],
                                    A.CHECKPOINT: session.artifacts.get("checkpoint", b"")}, "the page's artifacts")
    data_inputs, label_spec = art.inputs(session.state)
    if len(data_inputs) != 1:
        raise NotForCli("the model takes %d data inputs; the CLI trains models with one" % len(data_inputs))
    inp = data_inputs[0]
    _record_scaling(session, inp, settings)
    task = art.task(session.state)
    if task != d["task"]:
        raise NotForCli("the page trains %s on this table with %s, but the CLI reads a %s loss's targets as %s"
                        % (d["task"], model.get("loss"), art.loss_kind(session.state),
                           "class ids" if task == "classification" else "float values of the label column"))
    if session._added:
        raise NotForCli("%d sample(s) were added to the table in the page; data.csv cannot place them where "
                        "the run has them" % sum(len(y) for _, y in session._added))
    if int(src.get("seed", 0)) != int(session.seed):
        raise NotForCli("the validation split used seed %s and the shuffling seed %s; the CLI uses one seed for "
                        "both" % (src.get("seed", 0), session.seed))
    # The full table in its original row order, exactly as use_csv read it (the split is re-made from it).
    ds = _data.load_csv(str(session._csv_text), label=src["label"], task=src.get("task") or None,
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
    args = argparse.Namespace(data=text.encode("utf-8"), label=label, expected=None, input_shape=None,
                              image_size=None, validation=None, validation_expected=None, resume=True)
    try:
        train, val, _, _ = _train.prepare_data(args, art, session.state, settings, inp, label_spec, task)
    except PytrainError as e:
        raise NotForCli("its data.csv does not load in the CLI (%s)" % e) from None
    cli_val = (val.x, val.y) if val is not None else (train.x[:0], train.y[:0])
    for what, a, b in (("training features", session._model_x(d["train_x"]), train.x),
                       ("training targets", session._targets(d["train_y"]), train.y),
                       ("validation features", session._model_x(d["val_x"]), cli_val[0]),
                       ("validation targets", d["val_y"], cli_val[1])):
        if not _same(a, b):
            raise NotForCli("the CLI would read other %s from data.csv than the page trains on" % what)
    settings["data_digest"] = _train._digest(train.x, train.y)
    props[A.P_TRAIN] = json.dumps(settings)

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


def _kind_of(blob: bytes, name: str) -> Tuple[Optional[str], str]:
    """("training" | "eval" | "optimizer" | "checkpoint" | None, why) from the file's content."""
    from pytrain.api import CheckpointState

    try:
        CheckpointState.load_checkpoint(blob)
        return "checkpoint", "a pytrain checkpoint"
    except PytrainError:
        pass
    try:
        model = _proto.load_model(blob, name)
    except Exception:  # not ONNX either (any decoder failure): say so by name below
        return None, "neither an ONNX model nor a pytrain checkpoint"
    meta = _proto.model_metadata(model)
    marked = meta.get("pytrain.artifact")
    if marked in ("training", "eval", "optimizer"):
        return marked, "marked as the %s model" % marked
    if feature_head.MARK in meta:
        return "backbone", "the frozen feature extractor the head trains on"
    # Artifacts from other tools (e.g. onnxruntime-training) carry no mark: tell them by their graphs.
    g = model.graph
    inputs = {i.name for i in g.input}
    outputs = [o.name for o in g.output]
    if "learning_rate" in inputs:
        return "optimizer", "takes a learning rate"
    if any("grad" in o for o in outputs):
        return "training", "outputs gradients"
    return "eval", "an ONNX model without gradients"


def _array(blob: bytes, name: str) -> np.ndarray:
    """A run file's ``.npy`` member: numbers only (no pickled objects)."""
    try:
        a = np.load(io.BytesIO(blob), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise WebappError("%s is not a readable .npy array (%s)" % (name, e)) from None
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub" or a.ndim < 1:
        raise WebappError("%s holds %s; a run file's examples are numeric arrays" % (name, getattr(a, "dtype", a)))
    return a


def sort_files(files: Dict[str, bytes]) -> Tuple[Dict[str, bytes], Dict[str, Any], Any, Dict[str, str]]:
    """(artifacts by kind, run description, the run's data, {file name: what it was taken for}).

    Zip files (a downloaded run) are opened and their members sorted the same way; names never
    decide, so ``pytrain-step250.ckpt`` is a checkpoint because it holds one. The artifacts may
    include a ``backbone`` (the feature extractor of a "By example" run). The run's data is the
    table's text (``data.csv``), or {array name: array} for a run on examples (see
    :data:`EXAMPLE_FILES` and :func:`use_examples`), or None.
    """
    found: Dict[str, bytes] = {}
    run: Dict[str, Any] = {}
    table: Optional[str] = None
    examples: Dict[str, np.ndarray] = {}
    seen: Dict[str, str] = {}
    queue = list(files.items())
    while queue:
        name, blob = queue.pop(0)
        blob = bytes(blob)
        base = name.split("!")[-1]
        if base == RUN_JSON:
            try:
                run = json.loads(blob.decode("utf-8"))
            except ValueError:
                raise WebappError("%s is not valid JSON" % name) from None
            seen[name] = "run description"
            continue
        if base == DATA_CSV:
            table = blob.decode("utf-8", errors="replace")
            seen[name] = "training data"
            continue
        if base in EXAMPLE_FILES:   # a run file's examples
            examples[EXAMPLE_FILES[base]] = _array(blob, name)
            seen[name] = _EXAMPLE_WHAT[EXAMPLE_FILES[base]]
            continue
        kind, why = _kind_of(blob, name)
        if kind is None and blob[:4] == _ZIP_MAGIC:
            try:
                with zipfile.ZipFile(io.BytesIO(blob)) as z:
                    members = [m for m in z.infolist() if not m.is_dir()]
                    if len(members) > _MAX_MEMBERS:
                        raise WebappError("%s holds %d files; a run file holds a handful" % (name, len(members)))
                    for m in members:   # before inflating anything (the sizes a zip declares are checked on read)
                        limits.check_file(m.file_size, "%s!%s" % (name, m.filename))
                    queue.extend(("%s!%s" % (name, m.filename.split("/")[-1]), z.read(m)) for m in members)
            except (zipfile.BadZipFile, OSError, ValueError) as e:
                raise WebappError("%s is a damaged zip file (%s)" % (name, e)) from None
            seen[name] = "run file"
            continue
        if kind is None:
            raise WebappError("%s is %s; choose the run's .zip, or training_model.onnx, eval_model.onnx, "
                              "optimizer_model.onnx and the checkpoint" % (name, why))
        if kind in found:
            raise WebappError("two files hold a %s model or checkpoint (%s and an earlier one); choose one run's files"
                              % (kind, name))
        found[kind] = blob
        seen[name] = "%s (%s)" % (kind, why)
    head_on_backbone = (run.get("model") or {}).get("origin") == "backbone"
    if "backbone" in found and not head_on_backbone:
        raise WebappError("a feature extractor (backbone.onnx) was chosen without the run description of a head "
                          "trained on it (pytrain-run.json); choose the run's .zip")
    if head_on_backbone and "backbone" not in found:
        raise WebappError("the run's head trains on the features of a pretrained backbone, and its backbone.onnx "
                          "is not among the chosen files; choose the whole run's .zip")
    if examples and table is not None:
        raise WebappError("the chosen files hold both a table (data.csv) and examples (.npy); choose one run's files")
    return found, run, (examples or table), seen
