"""Index arithmetic shared by GatherElements, ScatterElements and ScatterND (and their gradients).

Each of these ops reads or writes ``data`` at a set of elements; here that set becomes one array of
flat (C-order) positions into ``data``, one per element of the output (gathers) or of ``updates``
(scatters). The kernels and their gradients are then a single ``take`` / ``ufunc.at`` / ``bincount``
on ``data.reshape(-1)``, and every index is checked once, here, with a pytrain error.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import norm_axis

#: ScatterElements / ScatterND reductions and the opset that introduced each
REDUCTIONS = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}


def reduction_of(op: str, reduction: object, opset: int) -> str:
    """The ``reduction`` attribute as a str, checked against the node's opset."""
    r = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
    if r not in REDUCTIONS:
        raise GraphError("%s: reduction %r is not one of %s" % (op, r, ", ".join(sorted(REDUCTIONS))))
    if opset < REDUCTIONS[r]:
        raise GraphError("%s: reduction %r needs opset %d or later, the model has opset %d"
                         % (op, r, REDUCTIONS[r], opset))
    return r


def _strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """Element (not byte) strides of a C-contiguous tensor of ``shape``."""
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * int(shape[i + 1])
    return tuple(out)


def _wrapped(op: str, indices: np.ndarray, dim: int, where: str) -> np.ndarray:
    """``indices`` checked to lie in ``[-dim, dim)`` and made non-negative, as intp (int32 in the
    browser's wasm32 numpy: int64 indices would not cast implicitly there)."""
    if indices.dtype.kind not in "iu":
        raise InputError("%s: indices must be integers, got %s" % (op, indices.dtype))
    if indices.size:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < -dim or hi >= dim:
            raise InputError("%s: indices must lie in [%d, %d) for %s, got values from %d to %d"
                             % (op, -dim, dim, where, lo, hi))
    idx = indices.astype(np.intp)
    idx[idx < 0] += dim
    return idx


def element_positions(op: str, data_shape: Sequence[int], indices: np.ndarray, axis: int) -> np.ndarray:
    """Flat positions into ``data`` of ``data[i0, .., indices[i], .., ir]`` for every index tuple i
    of ``indices`` (GatherElements / ScatterElements): shaped like ``indices``."""
    shape = tuple(int(d) for d in data_shape)
    r = len(shape)
    if indices.ndim != r:
        raise InputError("%s: indices must have the rank of data (%d), got shape %s for data shape %s"
                         % (op, r, indices.shape, shape))
    a = norm_axis(op, axis, r, err=GraphError)
    for d in range(r):
        if d != a and indices.shape[d] > shape[d]:
            raise InputError("%s: indices shape %s exceeds data shape %s on axis %d (only axis %d may differ)"
                             % (op, indices.shape, shape, d, a))
    strides = _strides(shape)
    pos = _wrapped(op, indices, shape[a], "axis %d of data shape %s" % (a, shape)) * strides[a]
    for d in range(r):
        if d != a and indices.shape[d] > 1:
            along = np.arange(indices.shape[d], dtype=np.intp) * strides[d]
            pos += along.reshape((-1,) + (1,) * (r - 1 - d))
    return pos


def nd_positions(op: str, data_shape: Sequence[int], indices: np.ndarray) -> np.ndarray:
    """Flat positions into ``data`` of every element ScatterND / GatherND addresses: shaped
    ``indices.shape[:-1] + data.shape[k:]`` with ``k = indices.shape[-1]``."""
    shape = tuple(int(d) for d in data_shape)
    if indices.ndim < 1:
        raise InputError("%s: indices must have rank >= 1, got a scalar" % op)
    k = int(indices.shape[-1])
    if k > len(shape):
        raise InputError("%s: indices.shape[-1] = %d exceeds the rank %d of data %s" % (op, k, len(shape), shape))
    strides = _strides(shape)
    base = np.zeros(indices.shape[:-1], dtype=np.intp)
    for j in range(k):
        base += _wrapped(op, indices[..., j], shape[j], "axis %d of data shape %s" % (j, shape)) * strides[j]
    block = shape[k:]
    inner = np.arange(int(np.prod(block, dtype=np.int64)), dtype=np.intp).reshape(block)
    return base.reshape(base.shape + (1,) * len(block)) + inner


def batched_nd_positions(op: str, data_shape: Sequence[int], indices: np.ndarray, batch_dims: int) -> np.ndarray:
    """:func:`nd_positions` with the first ``batch_dims`` axes of data and indices taken as batch axes
    (GatherND): shaped ``data.shape[:b] + indices.shape[b:-1] + data.shape[b + k:]``."""
    shape = tuple(int(d) for d in data_shape)
    b = int(batch_dims)
    if b < 0 or b >= min(len(shape), indices.ndim):
        raise GraphError("%s: batch_dims %d must be >= 0 and less than the ranks of data %s and indices %s"
                         % (op, b, shape, indices.shape))
    if tuple(indices.shape[:b]) != shape[:b]:
        raise InputError("%s: the first batch_dims=%d axes of indices %s and data %s must be equal"
                         % (op, b, indices.shape, shape))
    if b == 0:
        return nd_positions(op, shape, indices)
    batches = int(np.prod(shape[:b], dtype=np.int64))
    block = int(np.prod(shape[b:], dtype=np.int64))
    inner = nd_positions(op, shape[b:], indices.reshape((batches,) + indices.shape[b:]))
    offsets = (np.arange(batches, dtype=np.intp) * block).reshape((batches,) + (1,) * (inner.ndim - 1))
    return (inner + offsets).reshape(shape[:b] + inner.shape[1:])


def last_writers(pos: np.ndarray, size: int) -> np.ndarray:
    """A mask over ``pos`` (flat positions into a tensor of ``size`` elements): True at the last
    occurrence of each position. A scatter with reduction "none" and repeated indices keeps, as
    onnxruntime and onnx's reference do (their loops run in C order), the value written last; only
    that write reaches the output."""
    flat = pos.reshape(-1)
    order = np.arange(flat.size, dtype=np.intp)
    owner = np.full(size, -1, dtype=np.intp)
    owner[flat] = order
    won = owner[flat]
    # numpy assigns repeated fancy indices in order in practice but does not promise it: check that
    # every position ended up with its latest writer (O(n)), else find them by a stable sort
    if not np.all(won >= order):
        return last_by_sort(flat).reshape(pos.shape)
    return (won == order).reshape(pos.shape)


def last_by_sort(flat: np.ndarray) -> np.ndarray:
    """:func:`last_writers` of a 1-D ``flat`` by a stable sort (the slower, order-proof way)."""
    by_pos = np.argsort(flat, kind="mergesort")
    ends = np.ones(flat.size, dtype=bool)  # the last of each run of equal positions
    ends[:-1] = flat[by_pos[:-1]] != flat[by_pos[1:]]
    keep = np.zeros(flat.size, dtype=bool)
    keep[by_pos[ends]] = True
    return keep


_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter(data: np.ndarray, pos: np.ndarray, updates: np.ndarray, reduction: str) -> np.ndarray:
    """A copy of ``data`` with ``updates`` (shaped like ``pos``) combined in at the flat ``pos``."""
    out = np.array(data, copy=True, order="C")
    flat = out.reshape(-1)
    p, u = pos.reshape(-1), updates.reshape(-1)
    if reduction == "none":
        keep = last_writers(p, flat.size)
        flat[p[keep]] = u[keep]
    else:  # ufunc.at applies repeated positions one after the other, as the spec's loop does
        _AT[reduction].at(flat, p, u)
    return out
