"""Softmax (softmax.c) and SoftmaxCrossEntropyLoss with its gradient (softmax_ce.c) on the wasm
kernels.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.ops.nn.op_softmax import softmax_axis
from pytrain.ops.wasm import THREADS_MIN_ELEMENTS, plain, ptr, kernels, threaded


def _labels_ok(labels: np.ndarray, n: int) -> bool:
    return labels.dtype == np.int64 and labels.shape == (n,) and labels.flags.c_contiguous


def _ignores(labels: np.ndarray, ignore_index: Optional[int]) -> bool:
    """Whether ignore_index changes anything: a label equals it (torch's default -100 is set on
    every CrossEntropyLoss; a batch without such labels still takes the fast kernel)."""
    return ignore_index is not None and bool(np.any(np.asarray(labels) == int(ignore_index)))


def softmax_cross_entropy(ctx, scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None, *,
                          ignore_index: Optional[int] = None, reduction: str = "mean"):
    """SoftmaxCrossEntropyLoss of (N, C) scores without weights or ignore_index (softmax_ce.c), for
    registry.accelerate, at any size (what it saves is a dozen numpy calls, not arithmetic); the
    kernel declines rows with NaN/inf and labels out of range."""
    if (weights is not None or _ignores(labels, ignore_index) or reduction not in ("mean", "sum")
            or scores.ndim != 2 or scores.shape[0] == 0 or not plain(scores, min_size=1)
            or not _labels_ok(labels, scores.shape[0])):
        return None
    n, c = scores.shape
    log_prob = np.empty_like(scores) if ctx.wants(1) else None
    loss = np.empty((), dtype=np.float32)
    if kernels.softmax_ce(ptr(scores), ptr(labels), n, c, ptr(log_prob) if log_prob is not None else 0,
                        int(reduction == "mean"), ptr(loss)):
        return None
    return (loss, log_prob)


def softmax_cross_entropy_grad(ctx, dLoss: np.ndarray, log_prob: np.ndarray, labels: np.ndarray,
                               weights: Optional[np.ndarray] = None, *, reduction: str = "mean",
                               ignore_index: Optional[int] = None):
    """SoftmaxCrossEntropyLossGrad for the same cases (softmax_ce.c), for registry.accelerate."""
    if (weights is not None or _ignores(labels, ignore_index) or reduction not in ("mean", "sum")
            or log_prob.ndim != 2 or log_prob.shape[0] == 0 or not plain(log_prob, min_size=1)
            or not _labels_ok(labels, log_prob.shape[0]) or np.size(dLoss) != 1):
        return None
    n, c = log_prob.shape
    coef = float(np.asarray(dLoss).reshape(())) / (n if reduction == "mean" else 1)
    dx = np.empty_like(log_prob)
    if kernels.softmax_ce_grad(ptr(log_prob), ptr(labels), n, c, coef, ptr(dx)):
        return None
    return (dx,)


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
