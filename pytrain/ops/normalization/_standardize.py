"""The two halves every normalization layer shares: standardizing over some axes, and its backward.

Instance, group, layer and RMS normalization differ only in which axes the statistics cover, whether
the mean is subtracted (RMS does not), and how scale and bias broadcast. They all compute

    xhat = (x - mean) * inv_std        (RMS: xhat = x * inv_rms, inv_rms = 1 / sqrt(mean(x^2) + eps))

and, given g = dL/dxhat, all have the textbook backward

    dx = inv_std * (g - mean(g) - xhat * mean(g * xhat))      (RMS: without the mean(g) term).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from pytrain.base import dtypes

Stats = Tuple[np.ndarray, np.ndarray, np.ndarray]


def work_dtype(x_dtype: np.dtype, stash_type: Optional[int] = dtypes.FLOAT) -> np.dtype:
    """The precision statistics are computed in: the stash type, or X's type when that is wider
    (a float64 X stays float64, as in onnxruntime); float32 when the op has no stash_type."""
    stash = dtypes.to_numpy(stash_type if stash_type is not None else dtypes.FLOAT)
    return np.promote_types(stash, x_dtype)


def _trailing_rows(shape: Sequence[int], axes: Tuple[int, ...]) -> int:
    """The length of the rows a reduction over ``axes`` covers when those are the trailing axes
    (layer normalization's case), else 0: the row form then needs no per-axis reductions."""
    rank = len(shape)
    if not axes or axes != tuple(range(rank - len(axes), rank)):
        return 0
    n = 1
    for a in axes:
        n *= int(shape[a])
    return n


def standardize(x: np.ndarray, axes: Sequence[int], epsilon: float, work: np.dtype,
                center: bool = True) -> Stats:
    """(xhat, mean, inv_std) over ``axes`` in the ``work`` dtype; mean and inv_std keep the reduced
    axes as size 1. With ``center=False`` (RMS normalization) mean is 0 and inv_std = 1/rms."""
    axes = tuple(axes)
    xw = x.astype(work, copy=False)
    n = _trailing_rows(x.shape, axes)
    if n and x.size:
        # rows: one pass per statistic (the squares summed by einsum, no squared temporary) and
        # xhat scaled in place (a BERT LayerNorm in half the time of the per-axis form)
        kept = tuple(x.shape[:x.ndim - len(axes)]) + (1,) * len(axes)
        rows = xw.reshape(-1, n)
        if center:
            mean = np.mean(rows, axis=1, keepdims=True, dtype=work)
            d = rows - mean
        else:
            mean = np.zeros((1, 1), dtype=work)
            d = np.array(rows, dtype=work)  # (a copy: xhat is scaled in place below)
        var = np.einsum("ij,ij->i", d, d)[:, None] * work.type(1.0 / n)
        inv_std = np.asarray(1 / np.sqrt(var + work.type(epsilon)), dtype=work)
        d *= inv_std
        return (d.reshape(x.shape), mean.reshape(kept) if center else np.zeros((1,) * x.ndim, dtype=work),
                inv_std.reshape(kept))
    if center:
        mean = np.mean(xw, axis=axes, keepdims=True, dtype=work)
        d = xw - mean
    else:
        mean = np.zeros((1,) * x.ndim, dtype=work)
        d = xw
    var = np.mean(np.square(d), axis=axes, keepdims=True, dtype=work)
    inv_std = np.asarray(1 / np.sqrt(var + work.type(epsilon)), dtype=work)
    return d * inv_std, mean, inv_std


def standardize_backward(g: np.ndarray, xhat: np.ndarray, inv_std: np.ndarray, axes: Sequence[int],
                         center: bool = True) -> np.ndarray:
    """dx from g = dL/dxhat: inv_std * (g - mean(g) - xhat * mean(g * xhat)) over ``axes``
    (``center=False``: the RMS form, without the mean(g) term)."""
    axes = tuple(axes)
    n = 1
    for a in axes:
        n *= g.shape[a]
    inv_n = 1.0 / max(n, 1)
    rows = _trailing_rows(g.shape, axes)
    if (rows and g.size and g.shape == xhat.shape and inv_std.size * rows == g.size
            and g.dtype == xhat.dtype == inv_std.dtype):
        # rows, as in standardize: the row sums in one pass each, the result built in place
        g2, x2 = g.reshape(-1, rows), xhat.reshape(-1, rows)
        dx = x2 * (np.einsum("ij,ij->i", g2, x2)[:, None] * g.dtype.type(inv_n))
        np.subtract(g2, dx, out=dx)
        if center:
            dx -= np.sum(g2, axis=1, keepdims=True) * g.dtype.type(inv_n)
        dx *= inv_std.reshape(-1, 1)
        return dx.reshape(g.shape)
    proj = xhat * (np.sum(g * xhat, axis=axes, keepdims=True) * inv_n)
    if center:
        return inv_std * (g - np.sum(g, axis=axes, keepdims=True) * inv_n - proj)
    return inv_std * (g - proj)
