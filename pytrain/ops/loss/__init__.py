"""Loss ops of the ONNX standard: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss."""
