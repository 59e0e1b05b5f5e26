"""Softmax, LogSoftmax and Hardmax with the meaning of the model's opset.

From opset 13 each normalises along one axis (default -1). Before 13 (Softmax-1/11, LogSoftmax-1/11,
Hardmax-1/11) the input is coerced to 2-D at ``axis`` (default 1): the axes before it become the rows,
``axis`` and every axis after it the columns, and each row is normalised as a whole. Where ``axis``
is the last axis the two meanings agree."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from pytrain.ops.common import norm_axis
from pytrain.ops.registry import OpContext, kernel

#: the opset from which these ops normalise along one axis instead of coercing to 2-D
SINGLE_AXIS_OPSET = 13


def softmax_axis(ctx: OpContext, op: str, axis: Optional[int], rank: int) -> int:
    """The node's axis in ``[0, rank)``: the attribute, else the default of the model's opset."""
    if axis is None:
        axis = -1 if ctx.opset >= SINGLE_AXIS_OPSET else 1
    return norm_axis(op, axis, max(rank, 1))


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """``x - logsumexp(x, axis)``, shifted by the max so exp never overflows."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return np.asarray(shifted - lse, dtype=x.dtype)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    e /= np.sum(e, axis=axis, keepdims=True)
    return np.asarray(e, dtype=x.dtype)


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    # one at the first maximum of each slice, as onnx.reference and onnxruntime place it
    y = np.zeros_like(x)
    np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return y


def _apply(ctx: OpContext, op: str, fn: Callable[[np.ndarray, int], np.ndarray], x: np.ndarray,
           axis: Optional[int]) -> tuple:
    a = softmax_axis(ctx, op, axis, x.ndim)
    if x.ndim == 0 or a == x.ndim - 1 or ctx.opset >= SINGLE_AXIS_OPSET:
        return (fn(x, a if x.ndim else 0) if x.ndim else fn(x.reshape(1), 0).reshape(()),)
    rows = int(np.prod(x.shape[:a], dtype=np.int64))
    cols = int(np.prod(x.shape[a:], dtype=np.int64))
    return (fn(x.reshape(rows, cols), 1).reshape(x.shape),)


@kernel("Softmax")
def softmax(ctx, input, *, axis=None):
    return _apply(ctx, "Softmax", _softmax, input, axis)


@kernel("LogSoftmax")
def log_softmax_op(ctx, input, *, axis=None):
    return _apply(ctx, "LogSoftmax", log_softmax, input, axis)


@kernel("Hardmax")
def hardmax(ctx, input, *, axis=None):
    return _apply(ctx, "Hardmax", _hardmax, input, axis)
