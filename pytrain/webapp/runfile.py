"""One file for a whole run, and artifacts recognised by what they hold rather than their names.

The run file is a zip of the four artifacts under the names ``pytrain train`` reads from an
artifact directory (see :mod:`pytrain.cli._artifacts`), the checkpoint carrying the properties the
CLI needs to ``--resume`` it (progress, loss, outputs, settings, text classes), plus, for the page,
``pytrain-run.json`` (model description and data choice) and ``data.csv`` when the run trains on a
table. Unzipped into a folder it is an artifact directory: ``pytrain train DIR --data DIR/data.csv
--label COL --resume`` continues it, and the page and the widget take the zip back as it is.
"""
from __future__ import annotations

import io
import json
import zipfile
from typing import Any, Dict, List, Optional, Tuple

from pytrain import proto as _proto
from pytrain.cli import _artifacts as A
from pytrain.errors import PytrainError
from pytrain.webapp.common import ARTIFACT_FILES, WebappError

RUN_JSON = "pytrain-run.json"
DATA_CSV = "data.csv"
LOSS_KINDS = {"CrossEntropyLoss": "ce", "MSELoss": "mse", "BCEWithLogitsLoss": "bce", "L1Loss": "l1"}
_ZIP_MAGIC = b"PK\x03\x04"
_MAX_MEMBERS = 64


def write_run(artifacts: Dict[str, bytes], checkpoint: bytes, meta: Dict[str, Any],
              csv_text: Optional[str] = None) -> bytes:
    """The run as zip bytes (artifact files by their CLI names, run description, the table)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for key in ("training", "eval", "optimizer"):
            z.writestr(ARTIFACT_FILES[key], bytes(artifacts[key]))
        z.writestr(ARTIFACT_FILES["checkpoint"], bytes(checkpoint))
        z.writestr(RUN_JSON, json.dumps(meta, indent=1, sort_keys=True))
        if csv_text is not None:
            z.writestr(DATA_CSV, csv_text.encode("utf-8"))
    return out.getvalue()


def cli_properties(props: Any, loss: str, output: str, settings: Dict[str, Any],
                   classes: Optional[List[str]]) -> None:
    """Record in checkpoint properties what ``pytrain train --resume`` reads (cli/_artifacts.py)."""
    if loss in LOSS_KINDS:
        props[A.P_LOSS] = LOSS_KINDS[loss]
    props[A.P_OUTPUTS] = json.dumps([output])
    props[A.P_TRAIN] = json.dumps(settings)
    if classes:
        props[A.P_CLASSES] = json.dumps(list(classes))


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
    marked = _proto.model_metadata(model).get("pytrain.artifact")
    if marked in ("training", "eval", "optimizer"):
        return marked, "marked as the %s model" % marked
    # Artifacts from other tools (e.g. onnxruntime-training) carry no mark: tell them by their graphs.
    g = model.graph
    inputs = {i.name for i in g.input}
    outputs = [o.name for o in g.output]
    if "learning_rate" in inputs:
        return "optimizer", "takes a learning rate"
    if any("grad" in o for o in outputs):
        return "training", "outputs gradients"
    return "eval", "an ONNX model without gradients"


def sort_files(files: Dict[str, bytes]) -> Tuple[Dict[str, bytes], Dict[str, Any], Optional[str], Dict[str, str]]:
    """(artifacts by kind, run description, table text, {file name: what it was taken for}).

    Zip files (a downloaded run) are opened and their members sorted the same way; names never
    decide, so ``pytrain-step250.ckpt`` is a checkpoint because it holds one.
    """
    found: Dict[str, bytes] = {}
    run: Dict[str, Any] = {}
    table: Optional[str] = None
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
        kind, why = _kind_of(blob, name)
        if kind is None and blob[:4] == _ZIP_MAGIC:
            try:
                with zipfile.ZipFile(io.BytesIO(blob)) as z:
                    members = [m for m in z.infolist() if not m.is_dir()]
                    if len(members) > _MAX_MEMBERS:
                        raise WebappError("%s holds %d files; a run file holds a handful" % (name, len(members)))
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
    return found, run, table, seen
