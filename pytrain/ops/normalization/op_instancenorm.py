"""InstanceNormalization: each (instance, channel) of X (N, C, D1, ...) normalised over D1, ...,
then scaled and shifted per channel: y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c]."""
from __future__ import annotations

from typing import Tuple

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.normalization._standardize import standardize, work_dtype
from pytrain.ops.registry import OpContext, kernel


def check_channel_params(op: str, X: np.ndarray, **params: np.ndarray) -> None:
    """X is (N, C, D1, ...) with at least one spatial axis and each of ``params`` has shape (C,)."""
    if X.ndim < 3:
        raise InputError("%s: input must be (N, C, D1, ...) with at least one spatial axis, got shape %s"
                         % (op, X.shape))
    for name, v in params.items():
        if v.shape != (X.shape[1],):
            raise InputError("%s: %s must have shape (%d,) (the channels of input %s), got %s"
                             % (op, name, X.shape[1], X.shape, v.shape))


def instance_stats(X: np.ndarray, epsilon: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xhat, mean, inv_std) per (instance, channel), computed in float32 at least (float16 X)."""
    return standardize(X, range(2, X.ndim), epsilon, work_dtype(X.dtype))


@kernel("InstanceNormalization")
def instance_normalization(ctx: OpContext, input: np.ndarray, scale: np.ndarray, B: np.ndarray, *,
                           epsilon: float = 1e-5) -> tuple:
    X = input
    check_channel_params("InstanceNormalization", X, scale=scale, B=B)
    xhat = instance_stats(X, epsilon)[0].astype(X.dtype, copy=False)
    cshape = (1, -1) + (1,) * (X.ndim - 2)
    y = xhat * scale.reshape(cshape)
    y += B.reshape(cshape)
    return (y,)
