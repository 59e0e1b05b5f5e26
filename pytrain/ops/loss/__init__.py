"""Loss ops of the ONNX standard: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss."""
from __future__ import annotations
