"""The :class:`Dataset` every loader returns: features, labels and what is known about them."""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence

import numpy as np


class Dataset:
    """Features ``x`` (float32, one sample per row of axis 0) and labels ``y``.

    ``y`` is int64 class ids for classification and float32 for regression. ``classes`` maps class
    id -> original label text when the labels were strings (``classes[i]`` is id ``i``), else None.
    Unpacks like a tuple: ``x, y = dataset``.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, classes: Optional[Sequence[str]] = None,
                 feature_names: Optional[Sequence[str]] = None, task: str = "classification",
                 source: str = "") -> None:
        self.x = x
        self.y = y
        self.classes: Optional[List[str]] = list(classes) if classes is not None else None
        self.feature_names: Optional[List[str]] = (
            list(feature_names) if feature_names is not None else None)
        self.task = task
        self.source = source

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.x, self.y))

    @property
    def sample_shape(self) -> tuple:
        """Shape of one sample of ``x`` (without the batch axis)."""
        return tuple(int(d) for d in self.x.shape[1:])

    def subset(self, indices: np.ndarray) -> "Dataset":
        """The samples at ``indices`` (a new Dataset sharing classes/feature names)."""
        return Dataset(self.x[indices], self.y[indices], self.classes, self.feature_names,
                       self.task, self.source)

    def __repr__(self) -> str:
        return "Dataset({} samples, x {} {}, y {} {}, task={})".format(
            len(self), list(self.x.shape), self.x.dtype, list(self.y.shape), self.y.dtype, self.task)
