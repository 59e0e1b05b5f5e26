"""Softmax (softmax.c) and SoftmaxCrossEntropyLoss with its gradient (softmax.c's float32 forms, or softmax_ce.c's
in an older kernels.wasm) on the wasm kernels.
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


def _f32(name: str):
    """The kernel ``name``'s float32-exponential form (softmax.c, ``name``_f32: 3.6x (the loss) and 5x (its
    gradient) softmax_ce.c's double-precision series, within a few float32 ulps of it) where kernels.wasm has it,
    else ``name``."""
    fn = getattr(kernels, name + "_f32", None)
    return fn if fn is not None else getattr(kernels, name)


def softmax_cross_entropy(ctx, scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None, *,
                          ignore_index: Optional[int] = None, reduction: str = "mean"):
    """SoftmaxCrossEntropyLoss of (N, C) scores, or (N, C, T) ones laid out class-last (see _class_last),
    without weights or ignore_index (softmax_ce.c), for registry.accelerate, at any size (what it saves
    is a dozen numpy calls, not arithmetic); the kernel declines rows with NaN/inf and labels out of range."""
    rows = _class_last(scores)
    if (weights is not None or rows is None or _ignores(labels, ignore_index) or reduction not in ("mean", "sum")
            or rows.shape[0] == 0 or labels.shape != scores.shape[:1] + scores.shape[2:]):
        return None
    flat = _flat_labels(labels, rows.shape[0])
    if flat is None:
        return None
    n, c = rows.shape
    log_prob = np.empty_like(rows) if ctx.wants(1) else None
    loss = np.empty((), dtype=np.float32)
    if _f32("softmax_ce")(ptr(rows), ptr(flat), n, c, ptr(log_prob) if log_prob is not None else 0,
                          int(reduction == "mean"), ptr(loss)):
        return None
    return (loss, _as_input(log_prob, scores) if log_prob is not None else None)


def softmax_cross_entropy_grad(ctx, dLoss: np.ndarray, log_prob: np.ndarray, labels: np.ndarray,
                               weights: Optional[np.ndarray] = None, *, reduction: str = "mean",
                               ignore_index: Optional[int] = None):
    """SoftmaxCrossEntropyLossGrad for the same cases (softmax_ce.c), for registry.accelerate: the
    gradient in log_prob's layout (for (N, C, T), a view of (N * T, C) rows)."""
    rows = _class_last(log_prob)
    if (weights is not None or rows is None or _ignores(labels, ignore_index) or reduction not in ("mean", "sum")
            or rows.shape[0] == 0 or np.size(dLoss) != 1
            or labels.shape != log_prob.shape[:1] + log_prob.shape[2:]):
        return None
    flat = _flat_labels(labels, rows.shape[0])
    if flat is None:
        return None
    n, c = rows.shape
    coef = float(np.asarray(dLoss).reshape(())) / (n if reduction == "mean" else 1)
    dx = np.empty_like(rows)
    grad_rows = threaded("softmax_ce_grad_f32" if getattr(kernels, "softmax_ce_grad_f32", None) is not None
                         else "softmax_ce_grad", n * c, THREADS_MIN_ELEMENTS["softmax_ce_grad"])
    if grad_rows(ptr(rows), ptr(flat), n, c, coef, ptr(dx)):
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
