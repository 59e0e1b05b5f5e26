"""RMSNormalization (opset 23): y = x / sqrt(mean(x^2) + epsilon) * scale, the mean over axes
[axis, rank), computed in the stash_type; scale broadcasts to the normalised shape."""
from __future__ import annotations

from typing import Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.ops.common import broadcasts_to, norm_axis
from pytrain.ops.normalization._standardize import standardize, work_dtype
from pytrain.ops.registry import OpContext, kernel


def rms_stats(op: str, X: np.ndarray, scale: np.ndarray, axis: int, epsilon: float,
              stash_type: int) -> Tuple[np.ndarray, np.ndarray, Tuple[int, ...]]:
    """(xhat, inv_rms, normalised axes) after checking axis and scale's shape."""
    a = norm_axis(op, axis, X.ndim)
    if not broadcasts_to(scale.shape, X.shape[a:]):
        raise InputError("%s: scale of shape %s does not broadcast to the normalised shape %s (axis=%d)"
                         % (op, scale.shape, tuple(X.shape[a:]), axis))
    axes = tuple(range(a, X.ndim))
    xhat, _, inv_rms = standardize(X, axes, epsilon, work_dtype(X.dtype, stash_type), center=False)
    return xhat, inv_rms, axes


@kernel("RMSNormalization")
def rms_normalization(ctx: OpContext, X: np.ndarray, scale: np.ndarray, *, axis: int = -1,
                      epsilon: float = 1e-5, stash_type: int = dtypes.FLOAT) -> tuple:
    xhat = rms_stats("RMSNormalization", X, scale, axis, epsilon, stash_type)[0]
    # The scaling is done in X's type (the spec's second stage does not depend on stash_type).
    y = xhat.astype(X.dtype, copy=False) * scale
    return (y.astype(X.dtype, copy=False),)
