"""Softmax and LogSoftmax (opset 13 semantics: one axis, default -1)."""
from __future__ import annotations

import numpy as np

from pytrain.ops.common import norm_axis
from pytrain.ops.registry import kernel


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """``x - logsumexp(x, axis)``, shifted by the max so exp never overflows."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return np.asarray(shifted - lse, dtype=x.dtype)


@kernel("Softmax", since=13)
def softmax(ctx, input, *, axis=-1):
    a = norm_axis("Softmax", axis, input.ndim)
    e = np.exp(input - np.max(input, axis=a, keepdims=True))
    e /= np.sum(e, axis=a, keepdims=True)
    return (np.asarray(e, dtype=input.dtype),)


@kernel("LogSoftmax", since=13)
def log_softmax_op(ctx, input, *, axis=-1):
    return (log_softmax(input, norm_axis("LogSoftmax", axis, input.ndim)),)
