"""Small helpers the forward kernels share: axis normalisation, broadcasting, int-list inputs."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Type

import numpy as np

from pytrain.errors import GraphError, InputError, PytrainError


def arr(x: Any, like: Optional[np.ndarray] = None) -> np.ndarray:
    """``x`` as an ndarray (numpy returns scalars, not 0-d arrays, from ufuncs on 0-d inputs),
    in ``like``'s dtype when given (guards against numpy-2 promotion to float64)."""
    if like is not None:
        return np.asarray(x, dtype=like.dtype)
    return np.asarray(x)


def norm_axis(op: str, axis: int, rank: int, name: str = "axis",
              err: Type[PytrainError] = GraphError) -> int:
    """``axis`` in ``[-rank, rank)`` mapped to ``[0, rank)``; ``err`` naming ``op`` otherwise."""
    a = int(axis)
    if not -rank <= a < rank:
        raise err("%s: %s %d is out of range for a tensor of rank %d (expected %d..%d)"
                  % (op, name, a, rank, -rank, rank - 1))
    return a + rank if a < 0 else a


def norm_axes(op: str, axes: Sequence[int], rank: int, name: str = "axes",
              err: Type[PytrainError] = GraphError) -> Tuple[int, ...]:
    """Each of ``axes`` normalised by :func:`norm_axis`; repeated axes are an error."""
    out = tuple(norm_axis(op, a, rank, name, err) for a in axes)
    if len(set(out)) != len(out):
        raise err("%s: %s %s repeat an axis" % (op, name, list(int(a) for a in axes)))
    return out


def int_list(op: str, name: str, value: Optional[np.ndarray]) -> Optional[List[int]]:
    """A 0-/1-D integer input tensor as a list of Python ints (None stays None)."""
    if value is None:
        return None
    v = np.asarray(value)
    if v.dtype.kind not in "iu":
        raise InputError("%s: input %s must be an integer tensor, got %s" % (op, name, v.dtype))
    if v.ndim > 1:
        raise InputError("%s: input %s must be 1-D, got shape %s" % (op, name, v.shape))
    return [int(i) for i in v.reshape(-1)]


def broadcast_shape(op: str, *shapes: Sequence[int]) -> Tuple[int, ...]:
    """The numpy (multidirectional) broadcast of ``shapes``; InputError naming ``op`` when they
    do not broadcast. (``np.broadcast_shapes`` is numpy >= 1.20.)"""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dim = 1
        for s in shapes:
            j = i - rank + len(s)
            if j < 0:
                continue
            d = int(s[j])
            if d == 1:
                continue
            if dim != 1 and d != dim:
                raise InputError("%s: shapes %s do not broadcast together"
                                 % (op, ", ".join(str(tuple(x)) for x in shapes)))
            dim = d
        out.append(dim)
    return tuple(out)


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts (unidirectionally) to ``target``."""
    if len(shape) > len(target):
        return False
    tail = target[len(target) - len(shape):]
    return all(int(s) == 1 or int(s) == int(t) for s, t in zip(shape, tail))


def scalar_of(op: str, name: str, value: Optional[np.ndarray], default: Any) -> Any:
    """A one-element input tensor as a Python scalar, or ``default`` when absent."""
    if value is None:
        return default
    v = np.asarray(value)
    if v.size != 1:
        raise InputError("%s: input %s must hold one value, got shape %s" % (op, name, v.shape))
    return v.reshape(-1)[0].item()
