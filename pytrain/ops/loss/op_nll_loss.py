"""NegativeLogLikelihoodLoss: loss = -input[n, target[n, d..], d..] * weight[target], with
ignore_index and reduction none/sum/mean (mean divides by the summed weights of kept targets)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.registry import kernel

REDUCTIONS = ("none", "sum", "mean")


def nll_loss(op: str, input: np.ndarray, target: np.ndarray, weight: Optional[np.ndarray],
             ignore_index: Optional[int], reduction: str) -> np.ndarray:
    """The ONNX NegativeLogLikelihoodLoss of ``input`` (N, C, d1..) against ``target`` (N, d1..),
    shared by SoftmaxCrossEntropyLoss; ``op`` names the op in errors."""
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in REDUCTIONS:
        raise GraphError("%s: reduction must be one of %s, got %r" % (op, ", ".join(REDUCTIONS), reduction))
    if input.ndim < 2:
        raise InputError("%s: input must be (N, C, d1, ...), got shape %s" % (op, input.shape))
    n, c = input.shape[0], input.shape[1]
    if target.shape != (n,) + input.shape[2:]:
        raise InputError("%s: target shape %s must be %s for input shape %s"
                         % (op, target.shape, (n,) + input.shape[2:], input.shape))
    if target.dtype.kind not in "iu":
        raise InputError("%s: target must be an integer tensor, got %s" % (op, target.dtype))
    if weight is not None and weight.shape != (c,):
        raise InputError("%s: weight must have shape (%d,), got %s" % (op, c, weight.shape))
    if ignore_index is not None and np.any(target == ignore_index):  # else ignoring changes nothing
        keep = target != ignore_index
        t = np.where(keep, target, 0)
    else:
        keep = None
        t = target
    if t.size and (t.min() < 0 or t.max() >= c):
        raise InputError("%s: target values must lie in [0, %d) (or equal ignore_index=%r), got %d..%d"
                         % (op, c, ignore_index, t.min(), t.max()))
    dt = input.dtype
    if input.ndim == 2 and weight is None and keep is None:
        # the common classification case, without the general path's index juggling
        loss = -input[np.arange(n), t]
        if reduction == "none":
            return loss
        total = np.asarray(np.sum(loss, dtype=dt), dtype=dt)
        return total if reduction == "sum" else np.asarray(total / dt.type(n), dtype=dt)
    picked = np.take_along_axis(input, np.expand_dims(t, 1), axis=1).reshape(t.shape)
    w = np.ones(t.shape, dtype=dt) if weight is None else weight[t].astype(dt, copy=False)
    if keep is not None:
        w = w * keep
    loss = np.asarray(-picked * w, dtype=dt)
    if reduction == "none":
        return loss
    total = np.asarray(np.sum(loss, dtype=dt), dtype=dt)
    if reduction == "sum":
        return total
    with np.errstate(invalid="ignore", divide="ignore"):  # every target ignored: 0/0 = NaN
        return np.asarray(total / np.sum(w, dtype=dt), dtype=dt)


@kernel("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx, input, target, weight=None, *, ignore_index=None,
                                 reduction="mean"):
    return (nll_loss("NegativeLogLikelihoodLoss", input, target, weight, ignore_index, reduction),)
