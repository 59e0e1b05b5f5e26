"""Shape helpers shared by the gradient kernels: undoing broadcasting and normalising axes."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import KernelError


def sum_to_shape(g: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Sum ``g`` over the axes a tensor of ``shape`` was broadcast along (numpy rules).

    Returns ``g`` itself when it already has ``shape``: gradients are never mutated, so aliasing is safe.
    """
    shape = tuple(int(d) for d in shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead < 0:
        raise KernelError("cannot sum a gradient of shape %s to the larger shape %s" % (g.shape, shape))
    axes = list(range(lead))
    for i, d in enumerate(shape):
        if d == 1 and g.shape[lead + i] != 1:
            axes.append(lead + i)
        elif d != g.shape[lead + i]:
            raise KernelError("a gradient of shape %s cannot come from broadcasting shape %s"
                              % (g.shape, shape))
    return np.sum(g, axis=tuple(axes)).reshape(shape)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` made non-negative, checked against ``rank``."""
    a = int(axis)
    if not -rank <= a < max(rank, 1):
        raise KernelError("%s=%d is out of range for a tensor of rank %d" % (what, a, rank))
    return a + rank if a < 0 else a


def norm_axes(axes: Iterable[int], rank: int, what: str = "axes") -> Tuple[int, ...]:
    """Sorted, unique, non-negative axes."""
    return tuple(sorted(set(norm_axis(a, rank, what) for a in axes)))


def reduce_axes(rank: int, axes_input: Optional[np.ndarray], axes_attr: Optional[Sequence[int]],
                noop_with_empty_axes: int, what: str) -> Optional[Tuple[int, ...]]:
    """The axes a Reduce* op reduced, or None when it was a no-op (empty axes with noop_with_empty_axes).

    ``axes_input`` (opset 13/18 form, an int tensor or None) wins over the ``axes_attr`` attribute.
    """
    if axes_input is not None:
        axes = [int(v) for v in np.asarray(axes_input).reshape(-1)]
    elif axes_attr is not None:
        axes = [int(v) for v in axes_attr]
    else:
        axes = []
    if not axes:
        return None if noop_with_empty_axes else tuple(range(rank))
    return norm_axes(axes, rank, what)


def expand_reduced(dY: np.ndarray, axes: Tuple[int, ...], keepdims: int) -> np.ndarray:
    """``dY`` of a reduction with its reduced axes back as size-1 axes (a view)."""
    if keepdims:
        return dY
    shape = list(dY.shape)
    for a in axes:  # ascending, so each insert lands at its final position
        shape.insert(a, 1)
    return dY.reshape(shape)
