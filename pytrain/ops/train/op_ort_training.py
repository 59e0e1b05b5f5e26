"""ONNX Runtime's training ops (``com.microsoft``), as ORT 1.19's ``generate_artifacts`` writes them
into training models, with ORT's semantics (its CPU kernels in orttraining/training_ops/cpu/).

Where ORT's op means what one of pytrain's own gradient kernels computes (same inputs, outputs and
attributes), that kernel is registered under ORT's name too: ReluGrad (dX = dY where X > 0),
SoftmaxCrossEntropyLossGrad (reduction, ignore_index, optional weights) and ConvGrad (dX, dW, dB).
BatchNormInternal and BatchNormalizationGrad differ in a detail each, stated below.
ORT's ``MaxPoolGrad`` (default domain, inputs dY and Indices) takes dX's shape from ORT's graph-time
shape inference; ``pytrain.ort`` rewrites it to pytrain's MaxPoolGrad, which reads MaxPool's input.
GatherGrad, LayerNormalizationGrad and Scale (the embedding + LayerNorm models' ops) reuse pytrain's
GatherGrad and LayerNormalizationGrad with ORT's input order, and Scale is ORT's multiply (or divide)
by a one-element tensor. The transformer's add FusedMatMul (MatMul with transA/transB and alpha;
transBatchA/transBatchB are refused), ConcatTraining (Concat with each input's length along the
axis) and SoftmaxGrad_13 (pytrain's SoftmaxGrad: opset 13's single-axis Softmax). BERT's add
Gelu (ORT's exact, erf form: ONNX opset 20's Gelu), GeluGrad (pytrain's, exact form) and TanhGrad
(dX = dY * (1 - Y^2), from Tanh's output); recurrent layers add SplitTraining (Split by the lengths
ConcatTraining recorded). GRUTraining/LSTMTraining and their GRUGrad/LSTMGrad are read at load as
ONNX GRU/LSTM and pytrain's BPTT kernels (``pytrain/device/ort_made.py``), not run here.
InPlaceAccumulatorV2 is ORT's gradient accumulation, which ``pytrain.ort`` reads as the model's
interface (``pytrain/device/ort_made.py``) rather than runs.
"""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError, UnsupportedOpError
from pytrain.ops.registry import OpContext, kernel
from pytrain.ops.train.op_batchnorm_grad import batchnorm_grad
from pytrain.ops.train.op_batchnorm_training import channel_view
from pytrain.ops.train.op_conv_grad import conv_grad
from pytrain.ops.linalg import matmul
from pytrain.ops.shape.op_concat import concat
from pytrain.ops.shape.op_split import split
from pytrain.ops.elementwise.op_gelu import gelu
from pytrain.ops.train.op_gather_grad import gather_grad
from pytrain.ops.train.op_gelu_grad import gelu_grad
from pytrain.ops.train.op_layernorm_grad import layernorm_grad
from pytrain.ops.train.op_relu_grad import relu_grad
from pytrain.ops.train.op_softmax_cross_entropy_loss_grad import softmax_cross_entropy_loss_grad
from pytrain.ops.train.op_softmax_grad import softmax_grad

#: ONNX Runtime's contrib-op domain
ORT_DOMAIN = "com.microsoft"

kernel("ReluGrad", domain=ORT_DOMAIN)(relu_grad)
kernel("SoftmaxCrossEntropyLossGrad", domain=ORT_DOMAIN)(softmax_cross_entropy_loss_grad)
kernel("ConvGrad", domain=ORT_DOMAIN)(conv_grad)
kernel("SoftmaxGrad_13", domain=ORT_DOMAIN)(softmax_grad)


@kernel("Gelu", domain=ORT_DOMAIN)
def ort_gelu(ctx: OpContext, X: np.ndarray) -> tuple:
    """ORT's contrib Gelu: the exact form, x * Phi(x) (ONNX's Gelu with approximate="none")."""
    return gelu(ctx, X)


@kernel("GeluGrad", domain=ORT_DOMAIN)
def ort_gelu_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray) -> tuple:
    """ORT's GeluGrad(dY, X): the exact form's derivative, pytrain's GeluGrad."""
    return gelu_grad(ctx, dY, X)


@kernel("TanhGrad", domain=ORT_DOMAIN)
def ort_tanh_grad(ctx: OpContext, dY: np.ndarray, Y: np.ndarray) -> tuple:
    """ORT's TanhGrad(dY, Y): dX = dY * (1 - Y * Y), Y Tanh's output."""
    one = np.asarray(1, Y.dtype)
    return ((dY * (one - Y * Y)).astype(dY.dtype, copy=False),)


@kernel("SplitTraining", domain=ORT_DOMAIN)
def ort_split_training(ctx: OpContext, X: np.ndarray, split_lengths: np.ndarray, *, axis: int = 0) -> tuple:
    """ONNX Split of ``X`` along ``axis`` into the given lengths (ConcatTraining's second output)."""
    return split(ctx, X, np.asarray(split_lengths, np.int64).reshape(-1), axis=axis)


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


@kernel("GatherGrad", domain=ORT_DOMAIN)
def ort_gather_grad(ctx: OpContext, shape: np.ndarray, indices: np.ndarray, dY: np.ndarray, *,
                    axis: int = 0) -> tuple:
    """ORT's GatherGrad(shape of Gather's data, indices, dY): pytrain's GatherGrad, which reads only
    the data's shape (here a zero-size-in-memory view of that shape)."""
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    return gather_grad(ctx, dY, indices, np.broadcast_to(np.zeros((), dY.dtype), dims), axis=axis)


@kernel("LayerNormalizationGrad", domain=ORT_DOMAIN)
def ort_layernorm_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                       inv_std_var: np.ndarray, *, axis: int = -1, epsilon: float = 1e-5,
                       stash_type: int = 1) -> tuple:
    """dX, dScale, dBias from the saved mean and inverse standard deviation of ORT's LayerNormalization
    (axis .. last normalised): pytrain's LayerNormalizationGrad. ORT keeps the statistics in float
    (stash_type 1, the only one its CPU kernel reads); another stash_type is refused."""
    if int(stash_type) != 1:
        raise UnsupportedOpError("LayerNormalizationGrad node %r has stash_type=%r; pytrain runs ORT's "
                                 "LayerNormalizationGrad with float statistics (stash_type=1) only"
                                 % (ctx.node_name, stash_type))
    return layernorm_grad(ctx, dY, X, scale, mean, inv_std_var, axis=axis, epsilon=epsilon)


@kernel("Scale", domain=ORT_DOMAIN)
def ort_scale(ctx: OpContext, X: np.ndarray, scale: np.ndarray, *, scale_down: int = 0) -> tuple:
    """Y = X * scale, or X * (1 / scale) with ``scale_down`` (ORT's: the reciprocal taken in float32);
    ``scale`` holds one value (float or int64: the element count ORT's ReduceMean gradient divides by)."""
    if np.size(scale) != 1:
        raise KernelError("Scale node %r: scale must hold one value, got shape %s"
                          % (ctx.node_name, np.shape(scale)))
    value = np.float32(np.asarray(scale).reshape(()))
    if scale_down:
        if value == 0:
            raise KernelError("Scale node %r: scale_down by 0" % ctx.node_name)
        value = np.float32(1.0) / value
    return ((X * value.astype(X.dtype)).astype(X.dtype, copy=False),)


@kernel("FusedMatMul", domain=ORT_DOMAIN)
def ort_fused_matmul(ctx: OpContext, A: np.ndarray, B: np.ndarray, *, alpha: float = 1.0, transA: int = 0,
                     transB: int = 0, transBatchA: int = 0, transBatchB: int = 0) -> tuple:
    """Y = alpha * op(A) @ op(B), op transposing the last two axes where transA/transB say (ORT's
    MatMul kernel with its attributes). transBatchA/transBatchB (the batch axes moved behind) are
    not implemented and refused; so is a transpose of a 1-D operand."""
    if int(transBatchA) or int(transBatchB):
        raise UnsupportedOpError("FusedMatMul node %r has transBatchA=%r, transBatchB=%r; pytrain runs ORT's "
                                 "FusedMatMul with transBatchA=transBatchB=0 only"
                                 % (ctx.node_name, transBatchA, transBatchB))
    ops = []
    for name, M, t in (("A", A, transA), ("B", B, transB)):
        if int(t) and M.ndim < 2:
            raise UnsupportedOpError("FusedMatMul node %r has trans%s=1 on a %d-D %s; pytrain transposes "
                                     "operands of 2 or more axes only" % (ctx.node_name, name, M.ndim, name))
        ops.append(np.swapaxes(M, -1, -2) if int(t) else M)
    if ops[0].shape[-1] != (ops[1].shape[0] if ops[1].ndim == 1 else ops[1].shape[-2]):
        raise KernelError("FusedMatMul node %r: inner dimensions of op(A) %s and op(B) %s differ"
                          % (ctx.node_name, ops[0].shape, ops[1].shape))
    Y = np.asarray(matmul(ops[0], ops[1]), dtype=A.dtype)
    if float(alpha) != 1.0:
        Y = (Y * np.asarray(alpha, A.dtype)).astype(A.dtype, copy=False)
    return (Y,)


@kernel("ConcatTraining", domain=ORT_DOMAIN)
def ort_concat_training(ctx: OpContext, *inputs: np.ndarray, axis: int) -> tuple:
    """ONNX Concat, and (second output) each input's length along ``axis`` as an int64 vector."""
    (Y,) = concat(ctx, *inputs, axis=axis)
    lengths = None
    if ctx.wants(1):
        a = axis + inputs[0].ndim if axis < 0 else axis
        lengths = np.array([x.shape[a] for x in inputs], dtype=np.int64)
    return (Y, lengths)
