"""ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.

Axes as an attribute (opsets 1-13) or as the second input (opset 18, which also adds
noop_with_empty_axes); keepdims. Empty axes reduce every axis, unless noop_with_empty_axes is set:
then nothing is reduced and only the element-wise part applies (|x|, x², log x, ...), as
onnxruntime and onnx.reference do. Reducing an empty set gives the sum's identity: 0, and
log 0 = -inf for the two logarithmic ones.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.errors import UnsupportedOpError
from pytrain.ops.reduce.op_reduce import reduce_axes
from pytrain.ops.registry import kernel


def _axes(op: str, data: np.ndarray, axes_in: Optional[np.ndarray], axes, noop: int) -> Tuple[int, ...]:
    # reduce_axes says None for "no reduction": that is a reduction over no axis at all
    ax = reduce_axes(op, data, axes_in, axes, noop)
    return () if ax is None else ax


def _work_dtype(data: np.ndarray) -> np.dtype:
    # float16 sums overflow and lose digits fast: accumulate in float32, round once at the end
    return np.dtype(np.float32) if data.dtype == np.float16 else data.dtype


def _float_only(op: str, data: np.ndarray) -> None:
    if data.dtype.kind != "f":
        raise UnsupportedOpError("%s: input of type %s is not supported (it is defined through exp and log; "
                                 "cast the input to a float type)" % (op, data.dtype))


def _out(y, data: np.ndarray) -> tuple:
    return (np.asarray(y).astype(data.dtype, copy=False),)


@kernel("ReduceL1")
def reduce_l1(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    """sum(|x|) over axes."""
    ax = _axes("ReduceL1", data, axes_in, axes, noop_with_empty_axes)
    return _out(np.sum(np.abs(data), axis=ax, keepdims=bool(keepdims), dtype=_work_dtype(data)), data)


@kernel("ReduceSumSquare")
def reduce_sum_square(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    """sum(x²) over axes."""
    ax = _axes("ReduceSumSquare", data, axes_in, axes, noop_with_empty_axes)
    x = data.astype(_work_dtype(data), copy=False)
    return _out(np.sum(x * x, axis=ax, keepdims=bool(keepdims)), data)


@kernel("ReduceL2")
def reduce_l2(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    """sqrt(sum(x²)) over axes; integer inputs are truncated back to their type (as onnx.reference)."""
    ax = _axes("ReduceL2", data, axes_in, axes, noop_with_empty_axes)
    work = _work_dtype(data) if data.dtype.kind == "f" else np.dtype(np.float64)
    x = data.astype(work, copy=False)
    return _out(np.sqrt(np.sum(x * x, axis=ax, keepdims=bool(keepdims))), data)


@kernel("ReduceLogSum")
def reduce_log_sum(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    """log(sum(x)) over axes (-inf for a zero sum, NaN for a negative one)."""
    _float_only("ReduceLogSum", data)
    ax = _axes("ReduceLogSum", data, axes_in, axes, noop_with_empty_axes)
    s = np.sum(data, axis=ax, keepdims=bool(keepdims), dtype=_work_dtype(data))
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(np.log(s), data)


def log_sum_exp(x: np.ndarray, ax: Tuple[int, ...], keepdims: bool) -> np.ndarray:
    """log(sum(exp(x))) over ``ax`` computed as m + log(sum(exp(x - m))) with m the group's max, so
    large inputs do not overflow. A group whose max is infinite (all -inf, or a +inf) or empty uses
    m = 0: exp then yields exactly the 0 / inf the answer needs."""
    m = np.max(x, axis=ax, keepdims=True, initial=-np.inf) if ax else x
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis=ax)


@kernel("ReduceLogSumExp")
def reduce_log_sum_exp(ctx, data, axes_in=None, *, axes=None, keepdims=1, noop_with_empty_axes=0):
    """log(sum(exp(x))) over axes, numerically stable (the group's max is taken out first)."""
    _float_only("ReduceLogSumExp", data)
    ax = _axes("ReduceLogSumExp", data, axes_in, axes, noop_with_empty_axes)
    return _out(log_sum_exp(data.astype(_work_dtype(data), copy=False), ax, bool(keepdims)), data)
