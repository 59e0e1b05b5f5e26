"""CSV tables with a header row: one or more label columns, every other column a float feature.

Parsed with the stdlib ``csv`` module so it runs in Pyodide without pandas. Line numbers in
messages are 1-based as in a text editor (the header is line 1).
"""
from __future__ import annotations

import csv
import io
import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

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


MISSING_MODES = ("error", "drop", "fill")
MISSING_TOKENS = frozenset(["", "na", "n/a", "nan", "null", "none", "?"])
MAX_CATEGORIES = 10   # a text column with more distinct values is no category (names, ids, free text)
DELIMITERS = (",", ";", "\t", "|")


def is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING_TOKENS


def sniff_delimiter(text: str) -> str:
    """The separator of the first non-blank line: the most frequent of , ; tab | (``,`` if none)."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    counts = [(first.count(d), -i, d) for i, d in enumerate(DELIMITERS)]
    best = max(counts)
    return best[2] if best[0] > 0 else ","


class _Table(NamedTuple):
    """A table as read: its header, rows of cells, each row's line number in the file, and the file's name."""
    header: List[str]
    rows: List[List[str]]
    lines: List[int]
    where: str


def _mixed_block(table: _Table, feature_cols: List[int], label_cols: List[int], options: "CsvOptions",
                 notes: List[str]) -> Tuple[np.ndarray, List[str], List[List[str]], List[int], List[Dict[str, Any]]]:
    """Features of a table with missing values and/or text columns (the slow, careful path), and
    the columns as typed (see ``Dataset.columns`` in :func:`load_csv`)."""
    header, rows, lines, where = table
    missing, onehot = options.missing, options.onehot
    def bad_cell(r: int, c: int) -> DataError:
        return DataError("{} line {}, column {!r}: {} is not a number (expected a finite number)".format(
            where, lines[r], header[c], _describe_cell(rows[r][c])))

    text_cols = []
    for c in feature_cols:
        present = [r for r in range(len(rows)) if not is_missing(rows[r][c])]
        numeric = [r for r in present if _parse_float(rows[r][c]) is not None]
        if present and not numeric:
            text_cols.append(c)
        elif len(numeric) < len(present):   # numbers and a stray word: a typo, not a category
            raise bad_cell(next(r for r in present if _parse_float(rows[r][c]) is None), c)
    for c in text_cols:
        values = sorted({rows[r][c].strip() for r in range(len(rows)) if not is_missing(rows[r][c])})
        if not onehot:
            raise bad_cell(next(r for r in range(len(rows)) if not is_missing(rows[r][c])), c)
        if len(values) > MAX_CATEGORIES:
            raise DataError("{} column {!r} is text with {} different values (such as {}); only text columns "
                            "with at most {} values are encoded (one 0/1 column per value): exclude this "
                            "column".format(where, header[c], len(values), ", ".join(repr(v) for v in values[:3]),
                                            MAX_CATEGORIES))
    # rows to keep: a missing label always drops its row (when missing values are allowed at all)
    keep = []
    for r in range(len(rows)):
        gaps = [c for c in feature_cols if c not in text_cols and is_missing(rows[r][c])]
        label_gap = any(is_missing(rows[r][c]) for c in label_cols)
        if (gaps or label_gap) and missing == "error":
            c = (gaps or label_cols)[0]
            raise DataError("{} line {}, column {!r}: a missing value ({}); choose to drop rows with missing "
                            "values or to fill them with the column mean".format(
                                where, lines[r], header[c], _describe_cell(rows[r][c])))
        if label_gap or (gaps and missing == "drop"):
            continue
        keep.append(r)
    if len(keep) < len(rows):
        notes.append("dropped {} of {} rows with missing values".format(len(rows) - len(keep), len(rows)))
    if not keep:
        raise DataError("{}: no rows left after dropping those with missing values".format(where))
    rows, lines = [rows[r] for r in keep], [lines[r] for r in keep]
    columns: List[np.ndarray] = []
    names: List[str] = []
    typed: List[Dict[str, Any]] = []
    filled = 0
    for c in feature_cols:
        cells = [row[c] for row in rows]
        if c in text_cols:
            values = sorted({v.strip() for v in cells if not is_missing(v)})
            stripped = [v.strip() for v in cells]
            for v in values:
                columns.append(np.array([1.0 if s == v else 0.0 for s in stripped], dtype=np.float32))
                names.append("{}={}".format(header[c], v))
            typed.append({"name": header[c], "kind": "text", "values": values})
            notes.append("one-hot encoded text column {!r} ({} values: {})".format(
                header[c], len(values), ", ".join(values)))
            continue
        col = np.array([np.nan if is_missing(v) else float(v) for v in cells], dtype=np.float64)
        gaps = np.isnan(col)
        mean = float(np.mean(col[~gaps])) if (~gaps).any() else 0.0
        if gaps.any():
            col[gaps] = mean
            filled += int(gaps.sum())
        columns.append(col.astype(np.float32))
        names.append(header[c])
        typed.append({"name": header[c], "kind": "number", "fill": float(np.float32(mean))})
    if filled:
        notes.append("filled {} missing values with their column's mean".format(filled))
    return np.stack(columns, axis=1), names, rows, lines, typed


def read_rows(text: str, label: str, delimiter: str) -> Tuple[List[str], List[List[str]], List[int]]:
    """(header, rows of cells as written, their line numbers) of a CSV text; refuses a ragged or empty table."""
    if "\x00" in text:
        raise DataError("{} looks like a binary file, not a text table (it holds NUL bytes); save it as CSV: "
                        "text with a header row, values separated by commas, semicolons or tabs".format(label))
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


def _columns(header: List[str], label: Union[str, Sequence[str], None], drop: Sequence[str],
             where: str) -> Tuple[List[str], List[int], List[int]]:
    """(label names, label column indices, feature column indices) of a table's header, or DataError naming
    the column that is not there."""
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
    return label_names, label_cols, feature_cols


def _csv_labels(rows: List[List[str]], lines: List[int], header: List[str], label_cols: List[int], task: str,
                classes: Optional[Sequence[str]], where: str) -> Tuple[np.ndarray, Optional[List[str]]]:
    """(labels, class names or None) of the label columns: class ids for classification (numbers as they
    are, text as ids of its sorted values or of ``classes``), float32 targets for regression."""
    def locate(i: int) -> str:
        return "line {}".format(lines[i])

    what = "{} column {!r}".format(where, header[label_cols[0]])
    raw = [r[label_cols[0]].strip() for r in rows]
    if task != "classification":
        y = _numeric_block(rows, label_cols, header, lines, where, "regression target")
        return (y[:, 0] if len(label_cols) == 1 else y), None
    if len(label_cols) > 1:
        raise DataError("{}: classification takes one label column, got {}".format(where, len(label_cols)))
    numeric = [_parse_float(c) for c in raw]
    if classes is None and all(v is not None for v in numeric):
        return _labels.class_ids(np.array(numeric, dtype=np.float64), what, locate), None
    if any(not c for c in raw):
        i = raw.index("")
        raise DataError("{} {}: the label is an empty cell".format(what, locate(i)))
    return _labels.encode_strings(raw, classes, what, locate)


class CsvOptions(NamedTuple):
    """How :func:`load_csv` reads a table (see there): ``task``, ``classes``, columns to ``drop``, the
    ``delimiter`` (None: sniffed), the file's ``name``, what to do with ``missing`` values, ``onehot``."""
    task: Optional[str] = None
    classes: Optional[Sequence[str]] = None
    drop: Sequence[str] = ()
    delimiter: Optional[str] = ","
    name: Optional[str] = None
    missing: str = "error"
    onehot: bool = False


def load_csv(src: Source, label: Union[str, Sequence[str], None] = None, options: Optional[CsvOptions] = None,
             **fields: Any) -> Dataset:
    """Load a CSV table (a path, bytes, or text holding a newline) into a :class:`Dataset`, as ``options``
    say (a :class:`CsvOptions`, or its ``fields`` by name).

    ``label`` names the label column (or several, for multi-output regression); every other
    column not in ``drop`` is a float32 feature. ``task`` is "classification" (int64 class ids;
    string labels become ids of their sorted distinct values, returned as ``dataset.classes``),
    "regression" (float32) or None to infer it from the labels. Pass the training set's
    ``classes`` when loading its validation set so that ids agree.

    ``delimiter`` None sniffs ``,`` ``;`` tab or ``|`` from the header line. Missing values (an
    empty cell, NA, N/A, NaN, null, ?) are an error with ``missing="error"``; ``"drop"`` drops
    their rows, ``"fill"`` fills features with the column mean (a row missing its label is
    dropped). ``onehot`` encodes text feature columns of at most :data:`MAX_CATEGORIES` values
    as one 0/1 column per value (named ``column=value``). What was done is listed in
    ``dataset.notes``.
    """
    opts = options if options is not None else CsvOptions(**fields)
    task, classes, drop, delimiter, name, missing, onehot = opts
    _labels.check_task(task)
    if missing not in MISSING_MODES:
        raise DataError("missing={!r}: expected one of {}".format(missing, ", ".join(MISSING_MODES)))
    text, where = read_text(src, name, "data file")
    header, rows, lines = read_rows(text, where, delimiter or sniff_delimiter(text))
    label_names, label_cols, feature_cols = _columns(header, label, drop, where)
    notes: List[str] = []
    typed: Optional[List[Dict[str, Any]]] = None
    try:
        x = _numeric_block(rows, feature_cols, header, lines, where, "number")
        feature_names = [header[i] for i in feature_cols]
    except DataError:
        if missing == "error" and not onehot:
            raise   # the first bad cell, as it always was
        x, feature_names, rows, lines, typed = _mixed_block(_Table(header, rows, lines, where), feature_cols,
                                                            label_cols, opts, notes)

    task, reason = (task, "chosen") if task is not None else \
        ("regression", "there are several label columns") if len(label_cols) > 1 else \
        _infer_csv_task([r[label_cols[0]].strip() for r in rows])
    y, out_classes = _csv_labels(rows, lines, header, label_cols, task, classes, where)
    ds = Dataset(x, y, out_classes, feature_names, task, where)
    ds.task_reason = reason  # why this task, when it was inferred (pages show it)
    ds.notes = notes         # rows dropped, values filled, columns one-hot encoded
    # the columns as typed, when they are not the features as they are (text or missing values):
    # [{"name", "kind": "number", "fill": the mean a missing value takes} or {"name", "kind": "text",
    # "values": the one-hot columns' values, in order}] (pytrain.run.rows builds them into an export)
    ds.columns = typed
    return ds


def describe_csv(text: str, name: str = "the CSV file", sample: int = 2000) -> Dict[str, Any]:
    """What a page shows before loading a table: the separator, and per column whether it is
    numeric, how many cells are missing, and for text columns how many values (a sample of
    ``sample`` rows is read, with the same parser as :func:`load_csv`)."""
    delimiter = sniff_delimiter(text)
    header, rows, _ = read_rows(text, name, delimiter)
    body = rows[:sample]
    columns = []
    for c, h in enumerate(header):
        cells = [r[c] for r in body]
        present = [v.strip() for v in cells if not is_missing(v)]
        numeric = all(_parse_float(v) is not None for v in present)
        values = [] if numeric else sorted(set(present))
        columns.append({"name": h, "numeric": numeric, "missing": len(cells) - len(present),
                        "values": len(values), "encodable": 0 < len(values) <= MAX_CATEGORIES
                        and not any(_parse_float(v) is not None for v in present)})
    return {"delimiter": delimiter, "rows": len(rows), "columns": columns}


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
