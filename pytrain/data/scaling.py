"""Feature standardisation: fit on the training set, apply the same transform elsewhere."""
from __future__ import annotations

import json
from typing import Dict, List

import numpy as np

from pytrain.errors import DataError


class Standardizer:
    """Per-feature ``(x - mean) / std`` with statistics from the training data.

    Constant features get std 1 so they map to 0 instead of dividing by zero.
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
        std = x64.std(axis=0)
        std[std == 0] = 1.0
        return cls(x64.mean(axis=0), std)

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
