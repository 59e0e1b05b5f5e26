"""Squeeze and Unsqueeze: axes as an input (opset >= 13) or an attribute (older opsets)."""
from __future__ import annotations

from pytrain.errors import InputError
from pytrain.ops.common import int_list, norm_axes
from pytrain.ops.registry import kernel


@kernel("Squeeze")
def squeeze(ctx, data, axes_in=None, *, axes=None):
    ax = int_list("Squeeze", "axes", axes_in) if axes_in is not None else axes
    if ax is None or len(ax) == 0:
        return (data.reshape(tuple(d for d in data.shape if d != 1)),)
    norm = norm_axes("Squeeze", ax, data.ndim, err=InputError)
    for a in norm:
        if data.shape[a] != 1:
            raise InputError("Squeeze: axis %d of input shape %s has size %d, expected 1"
                             % (a, data.shape, data.shape[a]))
    return (data.reshape(tuple(d for i, d in enumerate(data.shape) if i not in norm)),)


@kernel("Unsqueeze")
def unsqueeze(ctx, data, axes_in=None, *, axes=None):
    ax = int_list("Unsqueeze", "axes", axes_in) if axes_in is not None else axes
    if ax is None or len(ax) == 0:
        raise InputError("Unsqueeze: axes is required (input 1 for opset >= 13)")
    rank = data.ndim + len(ax)
    norm = set(norm_axes("Unsqueeze", ax, rank, err=InputError))
    dims = iter(data.shape)
    return (data.reshape(tuple(1 if i in norm else next(dims) for i in range(rank))),)
