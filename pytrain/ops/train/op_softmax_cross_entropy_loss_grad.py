"""SoftmaxCrossEntropyLossGrad: the gradient of ONNX SoftmaxCrossEntropyLoss w.r.t. its scores."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("SoftmaxCrossEntropyLossGrad", domain=PYTRAIN_DOMAIN)
def softmax_cross_entropy_loss_grad(ctx: OpContext, dLoss: np.ndarray, log_prob: np.ndarray,
                                    labels: np.ndarray, weights: Optional[np.ndarray] = None, *,
                                    reduction: str = "mean",
                                    ignore_index: Optional[int] = None) -> tuple:
    """dScores = coef * w[label] * (softmax(scores) - onehot(label)) per sample.

    ``log_prob`` is LogSoftmax(scores) over axis 1, shaped (N, C, d1, ...); ``labels`` is (N, d1, ...).
    Ignored samples get w = 0. coef is dLoss (per sample for reduction "none"), divided for "mean"
    by the sum of w over the samples (as torch.nn.CrossEntropyLoss's weighted mean).
    """
    C = log_prob.shape[1]
    dtype = log_prob.dtype
    labels = np.asarray(labels).astype(np.int64, copy=False)
    if ignore_index is not None and not np.any(labels == int(ignore_index)):
        ignore_index = None  # no label is ignored (torch's default -100 on a plain batch): the fast path
    if log_prob.ndim == 2 and weights is None and ignore_index is None and reduction in ("sum", "mean"):
        return (_plain_grad(ctx, dLoss, log_prob, labels, reduction == "mean"),)
    safe, coef = sample_coefficients(ctx, "SoftmaxCrossEntropyLossGrad", dLoss, labels, weights, C, dtype,
                                     reduction, ignore_index)
    grad = np.exp(log_prob)
    idx = np.expand_dims(safe, 1)
    np.put_along_axis(grad, idx, np.take_along_axis(grad, idx, axis=1) - 1.0, axis=1)
    grad *= np.expand_dims(coef, 1)
    return (grad.astype(dtype, copy=False),)


def sample_coefficients(ctx: OpContext, op: str, dLoss: np.ndarray, labels: np.ndarray,
                        weights: Optional[np.ndarray], C: int, dtype: np.dtype, reduction: str,
                        ignore_index: Optional[int]) -> "tuple[np.ndarray, np.ndarray]":
    """(labels with ignored ones set to 0, the per-sample factor of d loss / d picked log-probability):
    w[label] (0 when ignored) times dLoss, divided for "mean" by the summed weights, as torch does.
    Shared by the cross-entropy and negative log-likelihood gradients."""
    ignored = (labels == int(ignore_index)) if ignore_index is not None else np.zeros(labels.shape, bool)
    safe = np.where(ignored, 0, labels)
    if np.any((safe < 0) | (safe >= C)):
        bad = labels[~ignored & ((labels < 0) | (labels >= C))]
        raise KernelError("%s node %r: label %d is out of range for %d classes"
                          % (op, ctx.node_name, int(bad.reshape(-1)[0]), C))

    # Per-sample weight: the class weight of its label, zero when the sample is ignored.
    if weights is not None:
        w = np.asarray(weights).astype(dtype, copy=False)[safe]
    else:
        w = np.ones(labels.shape, dtype)
    w = np.where(ignored, np.zeros((), dtype), w)

    d = np.asarray(dLoss).astype(dtype, copy=False)
    if reduction == "none":
        coef = w * d
    elif reduction in ("sum", "mean"):
        coef = w * d.reshape(())
        if reduction == "mean":
            total = float(np.sum(w, dtype=np.float64))
            # All samples ignored: torch's loss is nan but its gradient zero; keep the zeros.
            coef = coef * (1.0 / total if total != 0.0 else 0.0)
    else:
        raise KernelError("%s node %r: reduction must be 'none', 'sum' or 'mean', got %r"
                          % (op, ctx.node_name, reduction))
    return safe, coef


def _plain_grad(ctx: OpContext, dLoss: np.ndarray, log_prob: np.ndarray, labels: np.ndarray,
                mean: bool) -> np.ndarray:
    """The common case, (N, C) scores with no weights and nothing ignored: softmax - onehot, scaled."""
    n, c = log_prob.shape
    if labels.size and (labels.min() < 0 or labels.max() >= c):
        bad = labels[(labels < 0) | (labels >= c)]
        raise KernelError("SoftmaxCrossEntropyLossGrad node %r: label %d is out of range for %d classes"
                          % (ctx.node_name, int(bad.reshape(-1)[0]), c))
    grad = np.exp(log_prob)
    grad[np.arange(n), labels] -= 1.0
    coef = float(np.asarray(dLoss).reshape(())) / (n if mean else 1)
    if coef != 1.0:
        grad *= coef
    return grad
