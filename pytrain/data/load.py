"""One entry point that picks the loader from the file kind."""
from __future__ import annotations

import os
from typing import Any, NamedTuple, Optional, Sequence, Tuple, Union

from pytrain.data._source import Source, extension, is_pathlike
from pytrain.data.arrays import load_npz, load_raw
from pytrain.data.dataset import Dataset
from pytrain.data.images import load_image_folder
from pytrain.data.tabular import load_csv
from pytrain.errors import DataError

CSV_EXTENSIONS = (".csv", ".tsv", ".txt")
RAW_EXTENSIONS = (".bin", ".raw", ".dat")


class LoadOptions(NamedTuple):
    """What :func:`load_dataset` needs besides the source: the file's ``name`` (its kind when ``src`` is
    bytes), the ``label`` column(s) of a table, the ``task`` and ``classes``, an ``expected`` raw file with
    the per-sample ``input_shape`` and ``expected_shape``, an image folder's ``image_size`` and ``color``."""
    name: Optional[str] = None
    label: Union[str, Sequence[str], None] = None
    task: Optional[str] = None
    classes: Optional[Sequence[str]] = None
    expected: Optional[Source] = None
    input_shape: Optional[Sequence[int]] = None
    expected_shape: Optional[Sequence[int]] = None
    image_size: Optional[Tuple[int, int]] = None
    color: str = "L"


def load_dataset(src: Source, options: Optional[LoadOptions] = None, **fields: Any) -> Dataset:
    """Load ``src`` with the loader its kind calls for, as ``options`` say (a :class:`LoadOptions`, or its
    ``fields`` by name).

    A directory is an image folder; ``.npz`` an array archive; ``.csv``/``.tsv`` a table (needs
    ``label``); with ``expected`` given, ``src`` and ``expected`` are raw float32 files (needs
    ``input_shape``). Bytes without a ``name`` are sniffed: a zip header means ``.npz``, else CSV.
    """
    name, label, task, classes, expected, input_shape, expected_shape, image_size, color = \
        options if options is not None else LoadOptions(**fields)
    if expected is not None:
        if input_shape is None:
            raise DataError("raw input files need the per-sample input shape (e.g. --input-shape 64)")
        return load_raw(src, expected, input_shape, expected_shape, task=task, input_name=name)
    if is_pathlike(src) and os.path.isdir(os.fspath(src)):  # type: ignore[arg-type]
        return load_image_folder(os.fspath(src), size=image_size, color=color,  # type: ignore[arg-type]
                                 classes=classes)
    ext = extension(src, name)
    if ext == ".npz":
        return load_npz(src, task=task, classes=classes, name=name)
    if ext in CSV_EXTENSIONS:
        return load_csv(src, label, task=task, classes=classes,
                        delimiter="\t" if ext == ".tsv" else ",", name=name)
    if ext in RAW_EXTENSIONS:
        raise DataError("{!r} looks like a raw float32 file; give its expected-output file too "
                        "(e.g. --expected FILE --input-shape ...)".format(name or os.fspath(src)))  # type: ignore[arg-type]
    if isinstance(src, (bytes, bytearray, memoryview)):
        if bytes(src[:2]) == b"PK":
            return load_npz(src, task=task, classes=classes, name=name)
        return load_csv(src, label, task=task, classes=classes, name=name)
    if isinstance(src, str) and not is_pathlike(src):
        return load_csv(src, label, task=task, classes=classes, name=name)
    shown = name or os.fspath(src)  # type: ignore[arg-type]
    if not os.path.exists(shown):
        raise DataError("data file {!r} does not exist".format(shown))
    raise DataError("cannot tell the format of {!r}: expected .npz, .csv/.tsv, an image folder, "
                    "or raw float32 files with an expected file".format(shown))
