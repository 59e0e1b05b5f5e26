"""What a checkpoint holds: parameters (trainable and frozen), user properties and optimizer state.
Both file formats (:mod:`.zip_format`, :mod:`.ort_format`) decode into these."""
from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, MutableMapping, Optional, Union

import numpy as np

from pytrain.errors import CheckpointError

Property = Union[int, float, str]


class Parameter:
    """A parameter as ORT exposes it: ``data``, ``grad`` (None until a train step) and ``requires_grad``."""

    __slots__ = ("name", "data", "grad", "requires_grad", "shape", "dtype")

    def __init__(self, name: str, data: Optional[np.ndarray], requires_grad: bool,
                 shape: Optional[tuple] = None, dtype: Any = np.float32) -> None:
        self.name = name
        self.data = data
        self.grad: Optional[np.ndarray] = None
        self.requires_grad = requires_grad
        self.shape = tuple(data.shape) if data is not None else tuple(shape or ())
        self.dtype = np.dtype(data.dtype if data is not None else dtype)

    def __repr__(self) -> str:
        return "Parameter(%r, shape=%s, dtype=%s, requires_grad=%s%s)" % (
            self.name, list(self.shape), self.dtype, self.requires_grad,
            ", nominal" if self.data is None else "")


class Properties(MutableMapping):
    """User properties: int, float or str values only (what the format can hold exactly)."""

    def __init__(self, items: Optional[Mapping[str, Property]] = None) -> None:
        self._d: Dict[str, Property] = {}
        for k, v in (items or {}).items():
            self[k] = v

    def __setitem__(self, key: str, value: Property) -> None:
        if not isinstance(key, str):
            raise CheckpointError("property names must be strings, got %r" % (key,))
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CheckpointError("property %r must be an int, float or str, got %s"
                                  % (key, type(value).__name__))
        self._d[key] = value

    def __getitem__(self, key: str) -> Property:
        return self._d[key]

    def __delitem__(self, key: str) -> None:
        del self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return "Properties(%r)" % self._d


class OptimizerState:
    """Step count, learning rate and per-parameter state arrays (e.g. exp_avg, exp_avg_sq)."""

    def __init__(self, step: int = 0, learning_rate: Optional[float] = None,
                 slots: Optional[Dict[str, Dict[str, np.ndarray]]] = None) -> None:
        self.step = step
        self.learning_rate = learning_rate
        self.slots: Dict[str, Dict[str, np.ndarray]] = slots or {}
