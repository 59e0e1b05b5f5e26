"""Label conversion shared by the loaders: class ids, string classes, regression targets.

Messages locate the offending label through a ``locate(i)`` callback so that a CSV says
"line 12" and an array file says "sample 11".
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import DataError

TASKS = ("classification", "regression")
Locate = Callable[[int], str]


def check_task(task: Optional[str]) -> Optional[str]:
    """Validate a task name (None means: infer it from the labels)."""
    if task is not None and task not in TASKS:
        raise DataError("task must be 'classification' or 'regression', got {!r}".format(task))
    return task


def _preview(names: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (", ... ({} in all)".format(len(names)) if len(names) > limit else "")


def class_ids(values: np.ndarray, what: str, locate: Locate) -> np.ndarray:
    """Numeric labels as int64 class ids; every value must be an integer >= 0."""
    v = np.asarray(values)
    if v.dtype.kind == "b":
        return v.astype(np.int64)
    if v.dtype.kind == "u":
        return v.astype(np.int64)
    if v.dtype.kind == "i":
        bad = v < 0
    elif v.dtype.kind == "f":
        finite = np.isfinite(v)
        safe = np.where(finite, v, 0)
        bad = ~finite | (safe != np.floor(safe)) | (safe < 0)
    else:
        raise DataError("{}: labels of dtype {} cannot be class ids".format(what, v.dtype))
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        raise DataError("{} {}: label {!r} is not a class id (an integer >= 0); "
                        "use task 'regression' for continuous targets".format(
                            what, locate(i), v.reshape(-1)[i].item()))
    return v.astype(np.int64)


def encode_strings(labels: Sequence[str], classes: Optional[Sequence[str]], what: str,
                   locate: Locate) -> Tuple[np.ndarray, List[str]]:
    """Map string labels to ids. Without ``classes`` the sorted distinct labels define the ids;
    with ``classes`` (the training set's mapping) an unseen label is an error."""
    if classes is None:
        classes = sorted(set(labels))
    classes = [str(c) for c in classes]
    index = {c: i for i, c in enumerate(classes)}
    ids = np.empty(len(labels), dtype=np.int64)
    for i, lab in enumerate(labels):
        got = index.get(lab)
        if got is None:
            raise DataError("{} {}: label {!r} is not one of the known classes: {}".format(
                what, locate(i), lab, _preview(classes)))
        ids[i] = got
    return ids, classes


def targets(values: np.ndarray, what: str, locate: Locate) -> np.ndarray:
    """Regression targets as float32; every value must be finite."""
    v = np.asarray(values)
    if v.dtype.kind not in "biuf":
        raise DataError("{}: regression targets must be numbers, got dtype {}".format(what, v.dtype))
    v = v.astype(np.float32)
    finite = np.isfinite(v)
    if not finite.all():
        i = int(np.flatnonzero(~finite.reshape(-1))[0])
        flat_rows = v.shape[0] if v.ndim else 1
        per_row = max(1, v.size // max(1, flat_rows))
        raise DataError("{} {}: target {} is not a finite number".format(
            what, locate(i // per_row), v.reshape(-1)[i].item()))
    return v


def infer_task(values: np.ndarray) -> str:
    """Class-like labels (strings, bools, a few whole numbers) are classification; else regression."""
    return explain_task(values)[0]


# Whole numbers are class ids only when they look like ids: few distinct values, or ids that
# nearly fill 0..max (a column of 121 distinct integers between 278 and 1680 is a measurement).
MAX_SMALL_CLASS_COUNT = 20


def explain_task(values: np.ndarray) -> Tuple[str, str]:
    """(task, why): the inferred task and a sentence saying why, for people to check the guess."""
    v = np.asarray(values)
    if v.dtype.kind in "bUSO":
        return "classification", "the labels are text"
    if v.dtype.kind not in "iuf" or v.size == 0:
        return "regression", "the labels are numbers"
    if v.dtype.kind == "f" and not np.isfinite(v).all():
        return "regression", "the labels are numbers"
    if not (v == np.floor(v)).all():
        return "regression", "the labels have fractional values"
    if (v < 0).any():
        return "regression", "the labels include negative numbers, which are not class ids"
    distinct = np.unique(v)
    k, top = len(distinct), int(distinct[-1])
    span = "{} distinct whole numbers from {} to {}".format(k, int(distinct[0]), top)
    if k <= MAX_SMALL_CLASS_COUNT and top + 1 <= max(2 * k, MAX_SMALL_CLASS_COUNT):
        return "classification", "the labels are {}, which look like class ids".format(span)
    if top + 1 <= 2 * k and k <= max(2, v.size // 5):
        return "classification", "the labels are {}, which look like class ids".format(span)
    return "regression", "the labels are {}, too many or too spread out to be class ids".format(span)
