"""Standardisation: fit on the training set, apply the same transform elsewhere. The one rule for
a column's statistics (:func:`column_stats`) serves features and regression targets, in the CLI,
the page and the run file alike."""
from __future__ import annotations

import json
from typing import Dict, List, Tuple

import numpy as np

from pytrain.errors import DataError

#: a column whose standard deviation is at most this is constant: its std becomes 1, so it maps to
#: 0. Not ``std == 0``: a constant column's float64 mean can round, leaving a std of ~1e-17 that
#: would blow the rounding up into values of order 1.
CONSTANT_STD = 1e-12


def column_stats(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(mean, std) over the sample axis in float64, a constant column's std 1 (:data:`CONSTANT_STD`)."""
    x64 = np.asarray(x, dtype=np.float64)
    std = x64.std(axis=0)
    return x64.mean(axis=0), np.where(std > CONSTANT_STD, std, 1.0)


class Standardizer:
    """Per-feature ``(x - mean) / std`` with statistics from the training data.

    Constant features get std 1 (see :func:`column_stats`) so they map to 0 instead of dividing by zero.
    """

    def __init__(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.mean = np.asarray(mean, dtype=np.float32)
        self.std = np.asarray(std, dtype=np.float32)
        if self.mean.shape != self.std.shape:
            raise DataError("standardizer mean shape {} differs from std shape {}".format(
                list(self.mean.shape), list(self.std.shape)))

    @classmethod
    def fit(cls, x: np.ndarray) -> "Standardizer":
        """Statistics over the sample axis (computed in float64, stored as float32)."""
        x64 = np.asarray(x, dtype=np.float64)
        if x64.ndim < 1 or len(x64) == 0:
            raise DataError("cannot fit a standardizer on an empty set")
        return cls(*column_stats(x64))

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Standardised float32 copy of ``x``."""
        x = np.asarray(x, dtype=np.float32)
        if x.shape[1:] != self.mean.shape:
            raise DataError("standardizer was fitted on samples of shape {}, got {}".format(
                list(self.mean.shape), list(x.shape[1:])))
        return (x - self.mean) / self.std

    def inverse_transform(self, x: np.ndarray) -> np.ndarray:
        """Undo :meth:`transform`."""
        return np.asarray(x, dtype=np.float32) * self.std + self.mean

    def to_dict(self) -> Dict[str, List]:
        """JSON-friendly form (e.g. for a checkpoint property)."""
        return {"shape": list(self.mean.shape), "mean": self.mean.reshape(-1).tolist(),
                "std": self.std.reshape(-1).tolist()}

    @classmethod
    def from_dict(cls, d: Dict[str, List]) -> "Standardizer":
        """Inverse of :meth:`to_dict`."""
        try:
            shape = [int(s) for s in d["shape"]]
            return cls(np.array(d["mean"], dtype=np.float32).reshape(shape),
                       np.array(d["std"], dtype=np.float32).reshape(shape))
        except (KeyError, TypeError, ValueError) as e:
            raise DataError("malformed standardizer description ({})".format(e)) from None

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Standardizer":
        """Inverse of :meth:`to_json`."""
        try:
            d = json.loads(text)
        except ValueError as e:
            raise DataError("malformed standardizer JSON ({})".format(e)) from None
        return cls.from_dict(d)
