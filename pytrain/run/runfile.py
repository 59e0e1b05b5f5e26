"""The run file: one zip for a whole run, and artifacts recognised by what they hold rather than
their names (the format; the page writes its runs with :mod:`pytrain.webapp.runfile`).

The zip holds the four artifacts under the names of an artifact directory
(:data:`pytrain.base.layout.ARTIFACT_FILES`), the checkpoint carrying the properties ``pytrain train
--resume`` reads (:mod:`pytrain.run.properties`), plus ``pytrain-run.json`` (model description and
data choice) and ``data.csv`` when the run trains on a table, its text and tokenizer (:data:`TEXT_FILES`)
for a text run, or the examples as ``.npy`` members (:data:`EXAMPLE_FILES`) with, for a head on a
pretrained backbone, ``backbone.onnx`` (recognised by :data:`BACKBONE_MARK`). Unzipped into a folder it
is an artifact directory. Whenever the checkpoint records ``pytrain.no_resume``, the zip's comment repeats
it (:data:`NO_RESUME_COMMENT`), so the page can say so next to the download without opening the checkpoint.
"""
from __future__ import annotations

import io
import json
import zipfile
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain.base import limits
from pytrain import proto as _proto
from pytrain.errors import PytrainError
from pytrain.base.layout import ARTIFACT_FILES, ARTIFACT_KEY, LR_INPUT
from pytrain.run.properties import LOSS_KINDS, P_CLASSES, P_LOSS, P_OUTPUTS, P_TRAIN


class RunFileError(PytrainError, ValueError):
    """Files that do not make one run (the page reports it as its own error)."""


#: the metadata key marking a frozen feature extractor (a run file's ``backbone.onnx``)
BACKBONE_MARK = "pytrain.feature_extractor"

RUN_JSON = "pytrain-run.json"
DATA_CSV = "data.csv"
BACKBONE_ONNX = "backbone.onnx"
#: the samples of a run on decoded examples: {member name: array name}
EXAMPLE_FILES = {"examples.npy": "x", "labels.npy": "y", "added_examples.npy": "added_x",
                 "added_labels.npy": "added_y", "features.npy": "features"}
_EXAMPLE_WHAT = {"x": "examples", "y": "example labels", "added_x": "examples", "added_y": "example labels",
                 "features": "the backbone's features of the examples"}
#: the text of a "Your text" run: {member name: what it holds}; unzipped, ``pytrain train DIR --text DIR/text.txt
#: --tokenizer DIR/tokenizer.json --resume`` (``--text-csv DIR/text.csv`` for a classifier) continues it
TEXT_FILES = {"tokenizer.json": "tokenizer", "text.txt": "text", "text.csv": "text_csv"}
#: how the zip comment starts when ``pytrain train --resume`` cannot continue the run (the reason follows)
NO_RESUME_COMMENT = "pytrain.no_resume: "
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


def example_members(arrays: Dict[str, np.ndarray]) -> Dict[str, bytes]:
    """The ``.npy`` members of a run on decoded examples, from {array name: array} (see :data:`EXAMPLE_FILES`)."""
    return {member: _npy(arrays[key]) for member, key in EXAMPLE_FILES.items() if key in arrays}


def cli_properties(props: Any, loss: str, output: str, settings: Dict[str, Any],
                   classes: Optional[List[str]]) -> None:
    """Record in checkpoint properties what ``pytrain train --resume`` reads (pytrain.run.properties)."""
    if loss in LOSS_KINDS:
        props[P_LOSS] = LOSS_KINDS[loss]
    props[P_OUTPUTS] = json.dumps([output])
    props[P_TRAIN] = json.dumps(settings)
    if classes:
        props[P_CLASSES] = json.dumps(list(classes))


def _kind_of(blob: bytes, name: str) -> Tuple[Optional[str], str]:
    """("training" | "eval" | "optimizer" | "checkpoint" | None, why) from the file's content."""
    from pytrain.device.api import CheckpointState

    try:
        CheckpointState.load_checkpoint(blob)
        return "checkpoint", "a pytrain checkpoint"
    except PytrainError:
        pass
    try:
        from pytrain.engine.validate import load_model

        model = load_model(blob, name)
    except Exception:  # not ONNX either (any decoder failure): say so by name below
        return None, "neither an ONNX model nor a pytrain checkpoint"
    meta = _proto.model_metadata(model)
    marked = meta.get(ARTIFACT_KEY)
    if marked in ("training", "eval", "optimizer"):
        return marked, "marked as the %s model" % marked
    if BACKBONE_MARK in meta:
        return "backbone", "the frozen feature extractor the head trains on"
    # Artifacts from other tools (e.g. onnxruntime-training) carry no mark: tell them by their graphs.
    g = model.graph
    inputs = {i.name for i in g.input}
    outputs = [o.name for o in g.output]
    if LR_INPUT in inputs:
        return "optimizer", "takes a learning rate"
    if any("grad" in o for o in outputs):
        return "training", "outputs gradients"
    return "eval", "an ONNX model without gradients"


def _array(blob: bytes, name: str) -> np.ndarray:
    """A run file's ``.npy`` member: numbers only (no pickled objects)."""
    try:
        a = np.load(io.BytesIO(blob), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise RunFileError("%s is not a readable .npy array (%s)" % (name, e)) from None
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub" or a.ndim < 1:
        raise RunFileError("%s holds %s; a run file's examples are numeric arrays" % (name, getattr(a, "dtype", a)))
    return a


def sort_files(files: Dict[str, bytes]) -> Tuple[Dict[str, bytes], Dict[str, Any], Any, Dict[str, str]]:
    """(artifacts by kind, run description, the run's data, {file name: what it was taken for}).

    Zip files (a downloaded run) are opened and their members sorted the same way; names never
    decide, so ``pytrain-step250.ckpt`` is a checkpoint because it holds one. The artifacts may
    include a ``backbone`` (the feature extractor of a "By example" run). The run's data is the
    table's text (``data.csv``), or {array name: array} for a run on examples (see
    :data:`EXAMPLE_FILES` and :func:`pytrain.webapp.runfile.use_examples`), or {"tokenizer": bytes, "text" or
    "text_csv": str} for a text run (:data:`TEXT_FILES`), or None.
    """
    found: Dict[str, bytes] = {}
    run: Dict[str, Any] = {}
    table: Optional[str] = None
    examples: Dict[str, np.ndarray] = {}
    texts: Dict[str, Any] = {}
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
                raise RunFileError("%s is not valid JSON" % name) from None
            seen[name] = "run description"
            continue
        if base == DATA_CSV:
            table = blob.decode("utf-8", errors="replace")
            seen[name] = "training data"
            continue
        if base in TEXT_FILES:   # a text run's tokenizer.json and text file or CSV
            try:
                texts[TEXT_FILES[base]] = blob if base == "tokenizer.json" else blob.decode("utf-8")
            except UnicodeDecodeError:
                raise RunFileError("%s is not UTF-8 text" % name) from None
            seen[name] = "the run's %s" % TEXT_FILES[base].replace("_", " ")
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
                        raise RunFileError("%s holds %d files; a run file holds a handful" % (name, len(members)))
                    for m in members:   # before inflating anything (the sizes a zip declares are checked on read)
                        limits.check_file(m.file_size, "%s!%s" % (name, m.filename))
                    queue.extend(("%s!%s" % (name, m.filename.split("/")[-1]), z.read(m)) for m in members)
            except (zipfile.BadZipFile, OSError, ValueError) as e:
                raise RunFileError("%s is a damaged zip file (%s)" % (name, e)) from None
            seen[name] = "run file"
            continue
        if kind is None:
            raise RunFileError("%s is %s; choose the run's .zip, or %s and the %s"
                              % (name, why, ", ".join(ARTIFACT_FILES[k] for k in ("training", "eval", "optimizer")),
                                 ARTIFACT_FILES["checkpoint"]))
        if kind in found:
            raise RunFileError("two files hold a %s model or checkpoint (%s and an earlier one); choose one run's files"
                              % (kind, name))
        found[kind] = blob
        seen[name] = "%s (%s)" % (kind, why)
    head_on_backbone = (run.get("model") or {}).get("origin") == "backbone"
    if "backbone" in found and not head_on_backbone:
        raise RunFileError("a feature extractor (backbone.onnx) was chosen without the run description of a head "
                          "trained on it (pytrain-run.json); choose the run's .zip")
    if head_on_backbone and "backbone" not in found:
        raise RunFileError("the run's head trains on the features of a pretrained backbone, and its backbone.onnx "
                          "is not among the chosen files; choose the whole run's .zip")
    if sum(bool(d) for d in (examples, table is not None, texts)) > 1:
        raise RunFileError("the chosen files hold more than one run's data (%s); choose one run's files" % ", ".join(
            w for w, d in (("a table, data.csv", table is not None), ("examples, .npy", examples),
                           ("text, " + ", ".join(sorted(texts)), texts)) if d))
    return found, run, (examples or texts or table), seen
