"""CSV tables with a header row: one or more label columns, every other column a float feature.

Parsed with the stdlib ``csv`` module so it runs in Pyodide without pandas. Line numbers in
messages are 1-based as in a text editor (the header is line 1).
"""
from __future__ import annotations

import csv
import io
import math
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from pytrain.data import labels as _labels
from pytrain.data._source import Source, read_text
from pytrain.data.dataset import Dataset
from pytrain.errors import DataError


def _parse_float(cell: str) -> Optional[float]:
    """The cell's value, or None when it is not a finite number."""
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _describe_cell(cell: str) -> str:
    return "an empty cell" if not cell.strip() else repr(cell)


def _numeric_block(rows: List[List[str]], cols: List[int], names: List[str], lines: List[int],
                   label: str, what: str) -> np.ndarray:
    """Columns ``cols`` of ``rows`` as float32 [len(rows), len(cols)].

    numpy's string->float cast is the fast path; only when it fails (or yields inf/nan) do we walk
    the cells in Python to name the first bad one.
    """
    if not cols:
        return np.zeros((len(rows), 0), dtype=np.float32)
    strings = [[r[c] for c in cols] for r in rows]
    try:
        block = np.array(strings, dtype=str).astype(np.float64)
        if np.isfinite(block).all():
            return block.astype(np.float32)
    except ValueError:
        pass
    out = np.empty((len(rows), len(cols)), dtype=np.float32)
    for r, row in enumerate(strings):
        for k, cell in enumerate(row):
            value = _parse_float(cell)
            if value is None:
                raise DataError("{} line {}, column {!r}: {} is not a {} (expected a finite number)"
                                .format(label, lines[r], names[cols[k]], _describe_cell(cell), what))
            out[r, k] = value
    return out


def _read_rows(text: str, label: str, delimiter: str) -> Tuple[List[str], List[List[str]], List[int]]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: Optional[List[str]] = None
    rows: List[List[str]] = []
    lines: List[int] = []
    try:
        for cells in reader:
            if not cells or all(not c.strip() for c in cells):
                continue  # blank lines, e.g. a trailing newline
            if header is None:
                header = [c.strip() for c in cells]
                continue
            if len(cells) != len(header):
                raise DataError("{} line {}: {} cells, expected {} (one per header column)".format(
                    label, reader.line_num, len(cells), len(header)))
            rows.append(cells)
            lines.append(reader.line_num)
    except csv.Error as e:
        raise DataError("{} line {}: malformed CSV ({})".format(label, reader.line_num, e)) from None
    if header is None:
        raise DataError("{} is empty, expected a header row and data rows".format(label))
    if not rows:
        raise DataError("{} has a header but no data rows".format(label))
    for i, name in enumerate(header):
        if not name:
            raise DataError("{} line 1: column {} has an empty name in the header".format(label, i + 1))
    seen = set()
    for name in header:
        if name in seen:
            raise DataError("{} line 1: column name {!r} appears twice in the header".format(label, name))
        seen.add(name)
    return header, rows, lines


def load_csv(src: Source, label: Union[str, Sequence[str], None] = None, *,
             task: Optional[str] = None, classes: Optional[Sequence[str]] = None,
             drop: Sequence[str] = (), delimiter: str = ",", name: Optional[str] = None) -> Dataset:
    """Load a CSV table (a path, bytes, or text holding a newline) into a :class:`Dataset`.

    ``label`` names the label column (or several, for multi-output regression); every other
    column not in ``drop`` is a float32 feature. ``task`` is "classification" (int64 class ids;
    string labels become ids of their sorted distinct values, returned as ``dataset.classes``),
    "regression" (float32) or None to infer it from the labels. Pass the training set's
    ``classes`` when loading its validation set so that ids agree.
    """
    _labels.check_task(task)
    text, where = read_text(src, name, "data file")
    header, rows, lines = _read_rows(text, where, delimiter)
    available = ", ".join(repr(h) for h in header)
    if label is None:
        raise DataError("{}: no label column given; name one of the columns: {}".format(where, available))
    label_names = [label] if isinstance(label, str) else list(label)
    if not label_names:
        raise DataError("{}: label names no column; name one of: {}".format(where, available))
    for lab in label_names:
        if lab not in header:
            raise DataError("{}: label column {!r} not found; available columns: {}".format(
                where, lab, available))
    for d in drop:
        if d not in header:
            raise DataError("{}: column {!r} to drop not found; available columns: {}".format(
                where, d, available))
    label_cols = [header.index(lab) for lab in label_names]
    feature_cols = [i for i, h in enumerate(header) if h not in label_names and h not in drop]
    if not feature_cols:
        raise DataError("{}: no feature columns left besides the label column(s) {}".format(
            where, ", ".join(repr(n) for n in label_names)))
    x = _numeric_block(rows, feature_cols, header, lines, where, "number")

    def locate(i: int) -> str:
        return "line {}".format(lines[i])

    what = "{} column {!r}".format(where, label_names[0])
    raw = [r[label_cols[0]].strip() for r in rows]
    reason = "chosen"
    if task is None:
        task, reason = ("regression", "there are several label columns") if len(label_cols) > 1 \
            else _infer_csv_task(raw)
    out_classes: Optional[List[str]] = None
    if task == "classification":
        if len(label_cols) > 1:
            raise DataError("{}: classification takes one label column, got {}".format(
                where, len(label_cols)))
        numeric = [_parse_float(c) for c in raw]
        if classes is None and all(v is not None for v in numeric):
            y = _labels.class_ids(np.array(numeric, dtype=np.float64), what, locate)
        else:
            if any(not c for c in raw):
                i = raw.index("")
                raise DataError("{} {}: the label is an empty cell".format(what, locate(i)))
            y, out_classes = _labels.encode_strings(raw, classes, what, locate)
    else:
        y = _numeric_block(rows, label_cols, header, lines, where, "regression target")
        if len(label_cols) == 1:
            y = y[:, 0]
    ds = Dataset(x, y, out_classes, [header[i] for i in feature_cols], task, where)
    ds.task_reason = reason  # why this task, when it was inferred (pages show it)
    return ds


def _infer_csv_task(raw: List[str]) -> Tuple[str, str]:
    values = [_parse_float(c) for c in raw]
    if any(v is None for v in values):
        return "classification", "the labels are text"
    return _labels.explain_task(np.array(values, dtype=np.float64))


def to_csv_text(x: np.ndarray, y: np.ndarray, feature_names: Optional[Sequence[str]] = None,
                label: str = "label") -> str:
    """Write features and one label column as CSV text (header first); handy for tests and demos."""
    x2 = np.asarray(x).reshape(len(x), -1)
    names = list(feature_names) if feature_names is not None else [
        "f{}".format(i) for i in range(x2.shape[1])]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(names + [label])
    for row, lab in zip(x2.tolist(), np.asarray(y).tolist()):
        w.writerow([repr(v) if isinstance(v, float) else v for v in row] + [lab])
    return out.getvalue()
