"""Array files: numpy ``.npz`` archives and the raw float32 files ONERT's ``onert_train`` reads."""
from __future__ import annotations

import io
import zipfile
from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.data import labels as _labels
from pytrain.data._source import Source, read_bytes
from pytrain.data.dataset import Dataset
from pytrain.errors import DataError


def _sample(i: int) -> str:
    return "sample {}".format(i)


def _features(x: np.ndarray, where: str) -> np.ndarray:
    """Numeric features as float32, every value finite."""
    if x.dtype.kind not in "biuf":
        raise DataError("{}: features must be numbers, got dtype {}".format(where, x.dtype))
    if x.ndim < 2:
        # a 1-D x is one feature per sample, not one sample
        x = x.reshape(-1, 1)
    x = x.astype(np.float32)
    finite = np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise DataError("{} sample {}: features contain NaN or infinity".format(where, i))
    return x


def _labels_for(y: np.ndarray, task: Optional[str], classes: Optional[Sequence[str]],
                where: str) -> Tuple[np.ndarray, str, Optional[List[str]]]:
    """Convert a label array for ``task`` (inferred when None); returns (y, task, classes)."""
    if y.dtype.kind in "US":
        if task == "regression":
            raise DataError("{}: regression targets must be numbers, got text labels".format(where))
        strings = [str(s) for s in y.reshape(-1).tolist()]
        ids, out_classes = _labels.encode_strings(strings, classes, where, _sample)
        return ids, "classification", out_classes
    if y.dtype.kind not in "biuf":
        raise DataError("{}: labels must be numbers or text, got dtype {}".format(where, y.dtype))
    if task is None:
        task = _labels.infer_task(y)
    if task == "classification":
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise DataError("{}: class labels must be one id per sample (shape [N]), got shape {}"
                            .format(where, list(y.shape)))
        return _labels.class_ids(y, where, _sample), task, None
    return _labels.targets(y, where, _sample), task, None


def load_npz(src: Source, *, task: Optional[str] = None, classes: Optional[Sequence[str]] = None,
             x_key: str = "x", y_key: str = "y", name: Optional[str] = None) -> Dataset:
    """Load arrays ``x`` and ``y`` from a ``.npz`` archive (a path or its bytes).

    ``x`` becomes float32 ``[N, ...]``; ``y`` int64 class ids (classification; a text array maps
    its sorted distinct values to ids) or float32 targets (regression); ``task=None`` infers it.
    """
    _labels.check_task(task)
    raw, where = read_bytes(src, name, "data file")
    try:
        archive = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError("{} is not a readable .npz archive ({})".format(where, e)) from None
    if not hasattr(archive, "files"):
        raise DataError("{} holds a single .npy array, expected a .npz archive with arrays {!r} "
                        "and {!r}".format(where, x_key, y_key))
    with archive:
        keys = sorted(archive.files)
        for key in (x_key, y_key):
            if key not in keys:
                raise DataError("{}: array {!r} not found; the archive holds: {}".format(
                    where, key, ", ".join(repr(k) for k in keys) or "nothing"))
        try:
            x = archive[x_key]
            y = archive[y_key]
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
            raise DataError("{}: cannot read its arrays ({})".format(where, e)) from None
    if x.ndim == 0 or y.ndim == 0:
        raise DataError("{}: x and y must have a sample axis, got shapes {} and {}".format(
            where, list(x.shape), list(y.shape)))
    if len(x) != len(y):
        raise DataError("{}: x has {} samples but y has {}".format(where, len(x), len(y)))
    if len(x) == 0:
        raise DataError("{}: the archive holds no samples".format(where))
    x = _features(x, where)
    y, task, out_classes = _labels_for(y, task, classes, where)
    return Dataset(x, y, out_classes, None, task, where)


def _count(nbytes: int, sample_shape: Sequence[int], where: str, what: str) -> int:
    per = 4 * int(np.prod(sample_shape, dtype=np.int64))
    if per <= 0:
        raise DataError("{} shape {} must have positive dimensions".format(what, list(sample_shape)))
    if nbytes % per:
        raise DataError("{} has {} bytes, not a multiple of {} bytes (one float32 sample of shape "
                        "{})".format(where, nbytes, per, list(sample_shape)))
    return nbytes // per


def load_raw(input_src: Source, expected_src: Source, input_shape: Sequence[int],
             expected_shape: Optional[Sequence[int]] = None, *, task: Optional[str] = None,
             input_name: Optional[str] = None, expected_name: Optional[str] = None) -> Dataset:
    """Load raw little-endian float32 input/expected files as ``onert_train`` takes them.

    ``input_shape`` is one sample's shape; ``expected_shape`` defaults to what the expected file's
    size implies. For classification the expected rows must be one-hot vectors (``onert_train``'s
    form) or a single class id per sample; they become int64 ids.
    """
    _labels.check_task(task)
    shape = [int(d) for d in input_shape]
    xraw, xwhere = read_bytes(input_src, input_name, "input file")
    yraw, ywhere = read_bytes(expected_src, expected_name, "expected file")
    n = _count(len(xraw), shape, xwhere, "input")
    if n == 0:
        raise DataError("{} is empty".format(xwhere))
    if expected_shape is None:
        if len(yraw) % (4 * n):
            raise DataError("{} has {} bytes, which does not split into {} float32 samples (the "
                            "number of samples in {})".format(ywhere, len(yraw), n, xwhere))
        eshape = [len(yraw) // (4 * n)]
    else:
        eshape = [int(d) for d in expected_shape]
    m = _count(len(yraw), eshape, ywhere, "expected")
    if m != n:
        raise DataError("{} holds {} samples but {} holds {}".format(xwhere, n, ywhere, m))
    x = _features(np.frombuffer(xraw, dtype="<f4").reshape([n] + shape), xwhere)
    y = np.frombuffer(yraw, dtype="<f4").reshape([n] + eshape).astype(np.float32)
    if task is None:
        task = "regression"
    if task == "classification":
        y = _one_hot_ids(y, ywhere)
    else:
        y = _labels.targets(y, ywhere, _sample)
    return Dataset(x, y, None, None, task, xwhere)


def _one_hot_ids(y: np.ndarray, where: str) -> np.ndarray:
    flat = y.reshape(len(y), -1)
    if flat.shape[1] == 1:
        return _labels.class_ids(flat[:, 0], where, _sample)
    ok = np.isin(flat, (0.0, 1.0)).all(axis=1) & (flat.sum(axis=1) == 1)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise DataError("{} sample {}: expected a one-hot vector of {} classes, got {}".format(
            where, i, flat.shape[1], np.round(flat[i], 4).tolist()[:16]))
    return flat.argmax(axis=1).astype(np.int64)


def save_raw(array: np.ndarray, path: str) -> None:
    """Write ``array`` as raw little-endian float32 (the ``onert_train`` input format)."""
    np.ascontiguousarray(array, dtype="<f4").tofile(path)
