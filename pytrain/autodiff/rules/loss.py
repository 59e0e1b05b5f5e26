"""Gradient rules of the ops in ``pytrain/ops/loss``: SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss. See :mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


@gradient("SoftmaxCrossEntropyLoss", inputs=(0,), outputs=(0,))
def _softmax_cross_entropy(b: B, n: N, dy: G) -> G:
    ignore = n.attr("ignore_index")
    return [b.pt("SoftmaxCrossEntropyLossGrad", dy[0], n.saved(1), n.x(1), n.x(2),
                 reduction=n.attr("reduction", "mean"), ignore_index=ignore)]


@gradient("NegativeLogLikelihoodLoss", inputs=(0,))
def _nll_loss(b: B, n: N, dy: G) -> G:
    return [b.pt("NegativeLogLikelihoodLossGrad", dy[0], n.x(0), n.x(1), n.x(2),
                 reduction=n.attr("reduction", "mean"), ignore_index=n.attr("ignore_index"))]
