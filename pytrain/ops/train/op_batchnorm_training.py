"""BatchNormTraining: batch normalisation in training mode, with PyTorch's running-stat update."""
from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


def channel_view(v: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel vector shaped (1, C, 1, ...) to broadcast against an (N, C, ...) tensor."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def channel_sums(x: np.ndarray) -> np.ndarray:
    """Sum over every axis but 1 of an (N, C, ...) tensor: over the batch first (whole contiguous
    planes), then each channel's row, instead of one reduction over strided axes (2-3x faster on
    MobileNetV3's small planes)."""
    acc = np.float32 if x.dtype == np.float16 else None  # as np.mean/np.sum accumulate half floats
    return x.sum(axis=0, dtype=acc).reshape(x.shape[1], -1).sum(axis=1, dtype=acc)


def check_batch(ctx: OpContext, shape: Tuple[int, ...]) -> int:
    """The values per channel of an X of ``shape``, refused (KernelError naming the node) unless X is (N, C, ...)
    with more than one value per channel (the batch's variance needs two)."""
    if len(shape) < 2:
        raise KernelError("BatchNormTraining node %r: X must be (N, C, ...), got shape %s"
                          % (ctx.node_name, tuple(shape)))
    n = int(np.prod(shape, dtype=np.int64)) // int(shape[1]) if shape[1] else 0
    if n < 2:
        raise KernelError("BatchNormTraining node %r: training needs more than one value per channel, "
                          "got X of shape %s" % (ctx.node_name, tuple(shape)))
    return n


@kernel("BatchNormTraining", domain=PYTRAIN_DOMAIN)
def batchnorm_training(ctx: OpContext, X: np.ndarray, scale: np.ndarray, B: np.ndarray,
                       running_mean: np.ndarray, running_var: np.ndarray, *,
                       epsilon: float = 1e-5, momentum: float = 0.9) -> tuple:
    """Y = scale * (X - mean) / sqrt(var + eps) + B with the batch's statistics over all axes but 1.

    Outputs Y, running_mean_out, running_var_out, saved_mean, saved_invstd. The running variance
    takes the unbiased batch variance and ``momentum`` weighs the old value (ONNX convention:
    ONNX momentum 0.9 is torch momentum 0.1).
    """
    n = check_batch(ctx, X.shape)
    mean = channel_sums(X) * (1.0 / n)
    centred = X - channel_view(mean.astype(X.dtype, copy=False), X.ndim)
    Y = np.square(centred)  # a buffer: first the squares, then the output in place
    var = channel_sums(Y) * (1.0 / n)
    invstd = (1.0 / np.sqrt(var + float(epsilon))).astype(X.dtype, copy=False)
    np.multiply(centred, channel_view((invstd * scale).astype(X.dtype, copy=False), X.ndim), out=Y)
    Y += channel_view(B.astype(X.dtype, copy=False), X.ndim)
    mean = mean.astype(X.dtype, copy=False)

    return (Y.astype(X.dtype, copy=False),) + running_statistics(ctx, running_mean, running_var, mean, var, n,
                                                                momentum) + (mean, invstd)


def running_statistics(ctx: Any, running_mean: np.ndarray, running_var: np.ndarray, mean: np.ndarray,
                       var: np.ndarray, n: int, momentum: float) -> Tuple[Any, Any]:
    """BatchNormTraining's updated running mean and variance (None where the node does not ask for them): the
    old value weighed by ``momentum``, the batch's mean and its unbiased variance (``var`` over ``n`` values a
    channel) by 1 - momentum, in the running statistics' dtype. Shared by the numpy and the wasm kernels."""
    m = float(momentum)
    new_mean = (running_mean * m + mean * (1.0 - m)).astype(running_mean.dtype, copy=False) if ctx.wants(1) else None
    new_var = None
    if ctx.wants(2):
        unbiased = var * (n / (n - 1.0))
        new_var = (running_var * m + unbiased * (1.0 - m)).astype(running_var.dtype, copy=False)
    return new_mean, new_var
