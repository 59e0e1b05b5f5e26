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

from pytrain import dtypes

Stats = Tuple[np.ndarray, np.ndarray, np.ndarray]


def work_dtype(x_dtype: np.dtype, stash_type: Optional[int] = dtypes.FLOAT) -> np.dtype:
    """The precision statistics are computed in: the stash type, or X's type when that is wider
    (a float64 X stays float64, as in onnxruntime); float32 when the op has no stash_type."""
    stash = dtypes.to_numpy(stash_type if stash_type is not None else dtypes.FLOAT)
    return np.promote_types(stash, x_dtype)


def standardize(x: np.ndarray, axes: Sequence[int], epsilon: float, work: np.dtype,
                center: bool = True) -> Stats:
    """(xhat, mean, inv_std) over ``axes`` in the ``work`` dtype; mean and inv_std keep the reduced
    axes as size 1. With ``center=False`` (RMS normalization) mean is 0 and inv_std = 1/rms."""
    axes = tuple(axes)
    xw = x.astype(work, copy=False)
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
    proj = xhat * (np.sum(g * xhat, axis=axes, keepdims=True) * inv_n)
    if center:
        return inv_std * (g - np.sum(g, axis=axes, keepdims=True) * inv_n - proj)
    return inv_std * (g - proj)
