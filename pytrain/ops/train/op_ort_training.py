"""ONNX Runtime's training ops (``com.microsoft``), as ORT 1.19's ``generate_artifacts`` writes them
into training models, with ORT's semantics (its CPU kernels in orttraining/training_ops/cpu/).

Where ORT's op means what one of pytrain's own gradient kernels computes (same inputs, outputs and
attributes), that kernel is registered under ORT's name too: ReluGrad (dX = dY where X > 0),
SoftmaxCrossEntropyLossGrad (reduction, ignore_index, optional weights) and ConvGrad (dX, dW, dB).
BatchNormInternal and BatchNormalizationGrad differ in a detail each, stated below.
ORT's ``MaxPoolGrad`` (default domain, inputs dY and Indices) takes dX's shape from ORT's graph-time
shape inference; ``pytrain.ort`` rewrites it to pytrain's MaxPoolGrad, which reads MaxPool's input.
InPlaceAccumulatorV2 is ORT's gradient accumulation, which ``pytrain.ort`` reads as the model's
interface (``pytrain/ort/_ort_made.py``) rather than runs.
"""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError, UnsupportedOpError
from pytrain.ops.registry import OpContext, kernel
from pytrain.ops.train.op_batchnorm_grad import batchnorm_grad
from pytrain.ops.train.op_batchnorm_training import channel_view
from pytrain.ops.train.op_conv_grad import conv_grad
from pytrain.ops.train.op_relu_grad import relu_grad
from pytrain.ops.train.op_softmax_cross_entropy_loss_grad import softmax_cross_entropy_loss_grad

#: ONNX Runtime's contrib-op domain
ORT_DOMAIN = "com.microsoft"

kernel("ReluGrad", domain=ORT_DOMAIN)(relu_grad)
kernel("SoftmaxCrossEntropyLossGrad", domain=ORT_DOMAIN)(softmax_cross_entropy_loss_grad)
kernel("ConvGrad", domain=ORT_DOMAIN)(conv_grad)


@kernel("BatchNormalizationGrad", domain=ORT_DOMAIN)
def ort_batchnorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray, saved_mean: np.ndarray,
                       saved_inv_std: np.ndarray, *, epsilon: float = 1e-5) -> tuple:
    """dX, dScale, dBias from the saved batch mean and inverse standard deviation. ``epsilon`` is
    already in ``saved_inv_std``: ORT's CPU kernel reads it and does not use it either."""
    return batchnorm_grad(ctx, dY, X, scale, saved_mean, saved_inv_std)


@kernel("BatchNormInternal", domain=ORT_DOMAIN)
def ort_batchnorm_internal(ctx: OpContext, X: np.ndarray, scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray,
                           input_var: np.ndarray, *, epsilon: float = 1e-5, momentum: float = 0.9,
                           training_mode: int = 1) -> tuple:
    """BatchNormalization in training mode as ORT's forward of its gradient graph: Y with the batch's
    statistics; running_mean/var = momentum * input + (1 - momentum) * batch mean / variance, the
    variance BIASED (ORT's, where PyTorch and pytrain's BatchNormTraining take the unbiased one);
    saved_mean; saved_inv_std = 1 / sqrt(var + epsilon)."""
    if int(training_mode) != 1:
        raise UnsupportedOpError("BatchNormInternal node %r has training_mode=%r; pytrain runs ORT's "
                                 "BatchNormInternal in training mode (1) only" % (ctx.node_name, training_mode))
    if X.ndim < 2:
        raise KernelError("BatchNormInternal node %r: X must be (N, C, ...), got shape %s" % (ctx.node_name, X.shape))
    axes = (0,) + tuple(range(2, X.ndim))
    mean = np.mean(X, axis=axes)
    centred = X - channel_view(mean, X.ndim)
    var = np.mean(np.square(centred), axis=axes)
    inv_std = (1.0 / np.sqrt(var + float(epsilon))).astype(X.dtype, copy=False)
    Y = (centred * channel_view(inv_std * scale, X.ndim) + channel_view(B, X.ndim)).astype(X.dtype, copy=False)
    m = float(momentum)
    running_mean = (input_mean * m + mean * (1.0 - m)).astype(input_mean.dtype, copy=False) if ctx.wants(1) else None
    running_var = (input_var * m + var * (1.0 - m)).astype(input_var.dtype, copy=False) if ctx.wants(2) else None
    return (Y, running_mean, running_var, mean.astype(X.dtype, copy=False), inv_std)
