"""GroupNormalization: the C channels of X (N, C, D1, ...) split into num_groups groups of C/G
consecutive channels; each (instance, group) is normalised over its channels and spatial axes.

Two forms of scale and bias: opset 18 has one value per group (shape (G,)), opset 21 one per channel
(shape (C,)) and computes the statistics in ``stash_type``. Both are implemented; the form is the one
of the model's opset, and a scale of the other form's shape is refused (when G == C they coincide).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import GraphError, InputError
from pytrain.ops.normalization._standardize import standardize, work_dtype
from pytrain.ops.registry import OpContext, kernel

#: the first opset whose GroupNormalization takes per-channel scale and bias (and stash_type)
PER_CHANNEL_OPSET = 21


def group_stats(X: np.ndarray, num_groups: int, epsilon: float,
                stash_type: Optional[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xhat, mean, inv_std) with X viewed as (N, G, C/G * D1 * ...), statistics over the last axis."""
    grouped = X.reshape((X.shape[0], num_groups, -1))
    return standardize(grouped, (2,), epsilon, work_dtype(X.dtype, stash_type))


def per_channel(scale: np.ndarray, X: np.ndarray) -> bool:
    """Whether scale/bias are per channel (opset 21 form) rather than per group (opset 18 form)."""
    return scale.shape == (X.shape[1],)


def check_groups(op: str, X: np.ndarray, num_groups: Optional[int]) -> int:
    """``num_groups`` as an int, checked against X's channels."""
    if num_groups is None:
        raise GraphError("%s: the attribute num_groups is required" % op)
    num_groups = int(num_groups)
    if X.ndim < 2:
        raise InputError("%s: X must be (N, C, ...), got shape %s" % (op, X.shape))
    if num_groups < 1 or X.shape[1] % num_groups:
        raise GraphError("%s: num_groups=%d must be positive and divide the %d channels of X %s"
                         % (op, num_groups, X.shape[1], X.shape))
    return num_groups


def affine(xhat: np.ndarray, scale: np.ndarray, bias: np.ndarray, X: np.ndarray) -> np.ndarray:
    """scale * xhat + bias with xhat in X's dtype and grouped shape (N, G, -1); returns X's shape."""
    if per_channel(scale, X):
        cshape = (1, -1) + (1,) * (X.ndim - 2)
        y = xhat.reshape(X.shape) * scale.reshape(cshape)
        y += bias.reshape(cshape)
        return y
    y = xhat * scale.reshape(1, -1, 1)
    y += bias.reshape(1, -1, 1)
    return y.reshape(X.shape)


@kernel("GroupNormalization")
def group_normalization(ctx: OpContext, X: np.ndarray, scale: np.ndarray, bias: np.ndarray, *,
                        num_groups: Optional[int] = None, epsilon: float = 1e-5,
                        stash_type: int = dtypes.FLOAT) -> tuple:
    op = "GroupNormalization"
    num_groups = check_groups(op, X, num_groups)
    c = X.shape[1]
    want = c if ctx.opset >= PER_CHANNEL_OPSET else num_groups
    form = "per channel (opset >= 21)" if ctx.opset >= PER_CHANNEL_OPSET else "per group (opset 18)"
    for name, v in (("scale", scale), ("bias", bias)):
        if v.shape != (want,):
            raise InputError("%s: %s must have shape (%d,), %s, for X %s with num_groups=%d; got %s"
                             % (op, name, want, form, X.shape, num_groups, v.shape))
    # Opset 18 has no stash_type: its statistics are computed in float32 at least, like opset 21's default.
    stash = stash_type if ctx.opset >= PER_CHANNEL_OPSET else None
    xhat = group_stats(X, num_groups, epsilon, stash)[0].astype(X.dtype, copy=False)
    return (affine(xhat, scale, bias, X),)
