"""Softmax (softmax.c) and SoftmaxCrossEntropyLoss with its gradient on the wasm kernels: (N, C) rows and
class-last (N, C, T) views on softmax.c's float32 exponentials, (N, C, d1, ...) planes on softmax_ce.c.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.ops.nn.op_softmax import softmax_axis
from pytrain.ops.wasm import F32, THREADS_MIN_ELEMENTS, plain, ptr, kernels, threaded


def _labels_ok(labels: np.ndarray, n: int) -> bool:
    return labels.dtype == np.int64 and labels.shape == (n,) and labels.flags.c_contiguous


def _ignores(labels: np.ndarray, ignore_index: Optional[int]) -> bool:
    """Whether ignore_index changes anything: a label equals it (torch's default -100 is set on
    every CrossEntropyLoss; a batch without such labels still takes the fast kernel)."""
    return ignore_index is not None and bool(np.any(np.asarray(labels) == int(ignore_index)))


def _class_last(x: np.ndarray) -> Optional[np.ndarray]:
    """(N, C) float32 scores as they are; (N, C, T) scores whose class axis is the last in memory (a
    language model's logits: Transpose(perm 0, 2, 1) of the (N, T, C) head's output, a view) as the
    (N * T, C) rows the kernels read, without a copy; None for other layouts."""
    if x.ndim == 2:
        return x if plain(x, min_size=1) else None
    if x.ndim != 3:
        return None
    rows = x.transpose(0, 2, 1)
    if x.dtype != F32 or x.size == 0 or not rows.flags.c_contiguous:
        return None
    return rows.reshape((-1, x.shape[1]))


def _as_input(rows: np.ndarray, like: np.ndarray) -> np.ndarray:
    """(N * T, C) rows back in the layout of ``like`` ((N, C) or the (N, C, T) view)."""
    if like.ndim == 2:
        return rows
    n, c, t = like.shape
    return rows.reshape((n, t, c)).transpose(0, 2, 1)


def _flat_labels(labels: np.ndarray, n: int) -> Optional[np.ndarray]:
    flat = labels.reshape(-1) if labels.flags.c_contiguous else labels
    return flat if _labels_ok(flat, n) else None


def _planes(x: np.ndarray) -> Optional[Tuple[int, int, int]]:
    """(N, C, S) for C-contiguous float32 (N, C, d1, ...) scores whose class axis is not the last in memory
    (DBNet's (N, 2, H, W) per-pixel logits), which the planes kernels read in place; None otherwise (or when
    the page's kernels.wasm has none)."""
    if (x.ndim < 3 or x.dtype != F32 or not x.flags.c_contiguous or x.size == 0
            or getattr(kernels, "softmax_ce_planes", None) is None):
        return None
    return x.shape[0], x.shape[1], x.size // (x.shape[0] * x.shape[1])


def _takes(labels: np.ndarray, x: np.ndarray, weights, ignore_index, reduction: str) -> bool:
    return (weights is None and not _ignores(labels, ignore_index) and reduction in ("mean", "sum")
            and x.ndim >= 2 and labels.shape == x.shape[:1] + x.shape[2:])


def softmax_cross_entropy(ctx, scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None, *,
                          ignore_index: Optional[int] = None, reduction: str = "mean"):
    """SoftmaxCrossEntropyLoss of (N, C) scores, (N, C, T) ones laid out class-last (see _class_last) or
    (N, C, d1, ...) ones in their own layout (_planes), without weights or ignore_index (softmax_ce.c), for
    registry.accelerate, at any size (what it saves is a dozen numpy calls, not arithmetic); the kernels
    decline rows with NaN/inf and labels out of range."""
    if not _takes(labels, scores, weights, ignore_index, reduction):
        return None
    rows = _class_last(scores)
    planes = _planes(scores) if rows is None else None
    if planes is not None:
        return _planes_loss(ctx, scores, labels, planes, reduction)
    if rows is None or rows.shape[0] == 0:
        return None
    flat = _flat_labels(labels, rows.shape[0])
    if flat is None:
        return None
    n, c = rows.shape
    log_prob = np.empty_like(rows) if ctx.wants(1) else None
    loss = np.empty((), dtype=np.float32)
    if kernels.softmax_ce(ptr(rows), ptr(flat), n, c, ptr(log_prob) if log_prob is not None else 0,
                          int(reduction == "mean"), ptr(loss)):
        return None
    return (loss, _as_input(log_prob, scores) if log_prob is not None else None)


def _planes_loss(ctx, scores: np.ndarray, labels: np.ndarray, planes: Tuple[int, int, int], reduction: str):
    n, c, s = planes
    flat = _flat_labels(labels, n * s)
    if flat is None:
        return None
    log_prob = np.empty_like(scores) if ctx.wants(1) else None
    loss = np.empty((), dtype=np.float32)
    scratch = np.empty(2 * s, np.float64)
    if kernels.softmax_ce_planes(ptr(scores), ptr(flat), n, c, s, ptr(log_prob) if log_prob is not None else 0,
                                 int(reduction == "mean"), ptr(loss), ptr(scratch)):
        return None
    return (loss, log_prob)


def softmax_cross_entropy_grad(ctx, dLoss: np.ndarray, log_prob: np.ndarray, labels: np.ndarray,
                               weights: Optional[np.ndarray] = None, *, reduction: str = "mean",
                               ignore_index: Optional[int] = None):
    """SoftmaxCrossEntropyLossGrad for the same cases (softmax_ce.c), for registry.accelerate: the
    gradient in log_prob's layout (for (N, C, T) laid out class-last, a view of (N * T, C) rows)."""
    if not _takes(labels, log_prob, weights, ignore_index, reduction) or np.size(dLoss) != 1:
        return None
    rows = _class_last(log_prob)
    planes = _planes(log_prob) if rows is None else None
    if planes is not None:
        n, c, s = planes
        rows_n, dx = n * s, np.empty_like(log_prob)
    elif rows is None or rows.shape[0] == 0:
        return None
    else:
        rows_n, c = rows.shape
        dx = np.empty_like(rows)
    flat = _flat_labels(labels, rows_n)
    if flat is None:
        return None
    coef = float(np.asarray(dLoss).reshape(())) / (rows_n if reduction == "mean" else 1)
    if planes is not None:
        return None if kernels.softmax_ce_planes_grad(ptr(log_prob), ptr(flat), n, c, s, coef, ptr(dx)) else (dx,)
    grad_rows = threaded("softmax_ce_grad", rows_n * c, THREADS_MIN_ELEMENTS["softmax_ce_grad"])
    if grad_rows(ptr(rows), ptr(flat), rows_n, c, coef, ptr(dx)):
        return None
    return (_as_input(dx, log_prob),)


def softmax(ctx, input: np.ndarray, *, axis: Optional[int] = None) -> Optional[Tuple[np.ndarray]]:
    """Softmax over the last axis of a float32 tensor (softmax.c), for registry.accelerate; rows
    with NaN or infinities hand the node to numpy. (On the last axis every opset's meaning agrees.)"""
    if input.ndim == 0 or softmax_axis(ctx, "Softmax", axis, input.ndim) != input.ndim - 1 \
            or not plain(input, min_size=1) \
            or input.shape[-1] == 0:
        return None
    y = np.empty_like(input)
    n = input.shape[-1]
    softmax_rows = threaded("softmax", input.size, THREADS_MIN_ELEMENTS["softmax"])
    if softmax_rows(ptr(input), ptr(y), input.size // n, n):
        return None
    return (y,)
