"""onnxruntime's ``OrtValue`` at the API's edges: taken where ORT takes one, returned where ORT
returns one, when onnxruntime is installed (plain numpy arrays otherwise, e.g. in Pyodide)."""
from __future__ import annotations

from typing import Any

import numpy as np


def ort_value_class() -> Any:
    try:
        from onnxruntime import OrtValue
    except Exception:  # not installed (Pyodide), or a broken install: numpy arrays it is
        return None
    return OrtValue


def is_ort_value(x: Any) -> bool:
    cls = ort_value_class()
    return cls is not None and isinstance(x, cls)


def to_numpy(x: Any) -> Any:
    return x.numpy() if is_ort_value(x) else x


def to_ort_value(a: np.ndarray) -> Any:
    cls = ort_value_class()
    if cls is None:
        return a
    return cls.ortvalue_from_numpy(np.ascontiguousarray(a))
