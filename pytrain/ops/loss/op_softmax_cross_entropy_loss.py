"""SoftmaxCrossEntropyLoss: NegativeLogLikelihoodLoss of log_softmax(scores, axis=1), with the
optional log_prob output."""
from __future__ import annotations

from pytrain.errors import InputError
from pytrain.ops.loss.op_nll_loss import nll_loss
from pytrain.ops.nn.op_softmax import log_softmax
from pytrain.ops.registry import kernel


@kernel("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx, scores, labels, weights=None, *, ignore_index=None,
                               reduction="mean"):
    if scores.ndim < 2:
        raise InputError("SoftmaxCrossEntropyLoss: scores must be (N, C, d1, ...), got shape %s"
                         % (scores.shape,))
    log_prob = log_softmax(scores, 1)
    loss = nll_loss("SoftmaxCrossEntropyLoss", log_prob, labels, weights, ignore_index, reduction)
    return (loss, log_prob if ctx.wants(1) else None)
