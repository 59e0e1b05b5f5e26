"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd: axes as an input (ReduceSum >= 13,
the others >= 18) or an attribute (older opsets); keepdims; noop_with_empty_axes."""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import int_list, norm_axes
from pytrain.ops.registry import kernel


def reduce_axes(op: str, data: np.ndarray, axes_in: Optional[np.ndarray], axes_attr,
                noop_with_empty_axes: int) -> Optional[Tuple[int, ...]]:
    """The normalised axes to reduce, or None for "no reduction" (empty axes with noop set).

    The axes input wins over the attribute; empty axes mean every axis unless noop is set."""
    ax = int_list(op, "axes", axes_in) if axes_in is not None else axes_attr
    if ax is None or len(ax) == 0:
        return None if noop_with_empty_axes else tuple(range(data.ndim))
    return norm_axes(op, ax, data.ndim, err=InputError if axes_in is not None else GraphError)


def _reduce(op: str, fn: Callable[..., np.ndarray], data, axes_in, axes, keepdims, noop, **kw):
    ax = reduce_axes(op, data, axes_in, axes, noop)
    if ax is None:
        return (data,)
    return (np.asarray(fn(data, axis=ax, keepdims=bool(keepdims), **kw), dtype=data.dtype),)


@kernel("ReduceSum")
def reduce_sum(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceSum", np.sum, data, axes_in, axes, keepdims, noop_with_empty_axes,
                   dtype=data.dtype)


@kernel("ReduceProd")
def reduce_prod(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    return _reduce("ReduceProd", np.prod, data, axes_in, axes, keepdims, noop_with_empty_axes,
                   dtype=data.dtype)


@kernel("ReduceMean")
def reduce_mean(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    dt = data.dtype if data.dtype.kind == "f" else np.float64
    with np.errstate(invalid="ignore", divide="ignore"):  # mean of nothing is NaN
        return _reduce("ReduceMean", np.mean, data, axes_in, axes, keepdims, noop_with_empty_axes,
                       dtype=dt)


def _extreme(dtype: np.dtype, lowest: bool):
    # Identity of max/min, so reducing an empty set gives -inf/+inf (or the type's limit) as
    # opset 18 specifies instead of numpy's ValueError.
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    if dtype.kind == "b":
        return not lowest
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


@kernel("ReduceMax")
def reduce_max(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    kw = {"initial": _extreme(data.dtype, True)} if data.size == 0 else {}
    return _reduce("ReduceMax", np.max, data, axes_in, axes, keepdims, noop_with_empty_axes, **kw)


@kernel("ReduceMin")
def reduce_min(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    kw = {"initial": _extreme(data.dtype, False)} if data.size == 0 else {}
    return _reduce("ReduceMin", np.min, data, axes_in, axes, keepdims, noop_with_empty_axes, **kw)
