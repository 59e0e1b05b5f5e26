"""Layer 3, ops: the WebGPU kernels of BatchNormalization on the batch's statistics (training; shaders bn_* in
web/gpu/shaders_nn.js): pytrain's BatchNormTraining (what the generator makes of a trainable BatchNormalization)
and its BatchNormGrad, and ONNX BatchNormalization with training_mode=1. Each channel's sums are one workgroup's
(its threads' strided shares summed in a tree: any size, in float32, in another order than numpy's); the
arithmetic around them is the CPU kernels' (pytrain.ops.train.op_batchnorm_training, op_batchnorm_grad,
pytrain.ops.normalization.op_batchnorm), including which variance feeds the running statistics. A form the
shaders do not take (not float32, spatial=0, more channels than a grid's row of workgroups) returns None: the CPU
kernel runs (see :mod:`pytrain.ops.webgpu.kernels`)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from pytrain.ops.registry import OpContext
from pytrain.ops.train.op_batchnorm_training import check_batch
from pytrain.ops.webgpu import GpuTensor, device, on_gpu
from pytrain.ops.webgpu.mobile import channels

_MAX_GROUPS = 65535   # workgroups in a grid's x: one per channel


def _stats(X: Any, dims: Tuple[int, int, int], epsilon: float) -> List[GpuTensor]:
    """[mean, biased variance, 1 / sqrt(var + eps)] of each channel, (C,) each."""
    dev = device()
    n, c, s = dims
    out = [dev.empty((c,)) for _ in range(3)]
    dev.grid("bn_stats", (c, 1, 1), [on_gpu(X)] + out, [n, c, s, 1.0 / (n * s), float(np.float32(epsilon))])
    return out


def _normalized(X: Any, dims: Tuple[int, int, int], scale: Any, B: Any, epsilon: float,
                onnx_form: bool) -> Tuple[GpuTensor, List[GpuTensor]]:
    """Y from the batch's statistics, and those statistics (:func:`_stats`): BatchNormTraining's arithmetic, (x -
    mean) * invstd * scale + B, or with ``onnx_form`` ONNX BatchNormalization's, x * a + b from the variance (each
    as its CPU kernel computes it)."""
    n, c, s = dims
    stats = _stats(X, dims, epsilon)
    y = device().empty(X.shape)
    device().dispatch("bn_apply", y.size, [on_gpu(X), stats[0], stats[1 if onnx_form else 2], on_gpu(scale),
                                           on_gpu(B), y], [n, c, s, float(np.float32(epsilon)), int(onnx_form)])
    return y, stats


def _running(ctx: OpContext, stats: List[GpuTensor], running: Tuple[Any, Any], weights: Tuple[float, float],
             factor: float) -> Tuple[Optional[GpuTensor], Optional[GpuTensor]]:
    """The running mean and variance: old * m + batch's * (1 - m) (``weights``: m, 1 - m as the CPU kernel rounds
    them), the batch's variance times ``factor`` (n / (n - 1): unbiased) first; None for outputs 1, 2 not wanted."""
    if not (ctx.wants(1) or ctx.wants(2)):
        return None, None
    dev = device()
    c = stats[0].shape[0]
    rm, rv = dev.empty((c,)), dev.empty((c,))
    dev.dispatch("bn_running", c, stats[:2] + [on_gpu(running[0]), on_gpu(running[1]), rm, rv],
                 [c, weights[0], weights[1], factor])
    return (rm if ctx.wants(1) else None), (rv if ctx.wants(2) else None)


def _dims(X: Any, *per_channel: Any) -> Optional[Tuple[int, int, int]]:
    dims = channels(X, *per_channel)
    return None if dims is None or not 0 < dims[1] <= _MAX_GROUPS or dims[0] * dims[2] == 0 else dims


def batchnorm_training(ctx: OpContext, X: Any, scale: Any, B: Any, running_mean: Any, running_var: Any, *,
                       epsilon: float = 1e-5, momentum: float = 0.9) -> Optional[Tuple[Any, ...]]:
    """BatchNormTraining: Y, running mean and variance (the unbiased batch variance), saved mean and invstd."""
    dims = _dims(X, scale, B, running_mean, running_var)
    if dims is None:
        return None
    check_batch(ctx, X.shape)
    y, (mean, var, invstd) = _normalized(X, dims, scale, B, epsilon, False)
    m = float(momentum)
    count = dims[0] * dims[2]
    rm, rv = _running(ctx, [mean, var], (running_mean, running_var), (m, 1.0 - m), count / (count - 1.0))
    return (y, rm, rv, mean, invstd)


def batch_normalization_training(ctx: OpContext, X: Any, scale: Any, B: Any, input_mean: Any, input_var: Any, *,
                                 epsilon: float = 1e-5, momentum: float = 0.9) -> Optional[Tuple[Any, ...]]:
    """ONNX BatchNormalization with training_mode=1: Y = x * a + b from the batch's statistics, and the running
    statistics with the biased variance, m and 1 - m rounded to float32 as the CPU kernel does."""
    dims = _dims(X, scale, B, input_mean, input_var)
    if dims is None:
        return None
    y, (mean, var, _) = _normalized(X, dims, scale, B, epsilon, True)
    mom = np.float32(momentum)
    rm, rv = _running(ctx, [mean, var], (input_mean, input_var), (float(mom), float(np.float32(1) - mom)), 1.0)
    return (y, rm, rv)


def batchnorm_grad(ctx: OpContext, dY: Any, X: Any, scale: Any, saved_mean: Any,
                   saved_invstd: Any) -> Optional[Tuple[Any, Any, Any]]:
    """BatchNormGrad: dScale = sum dY * xhat, dB = sum dY, dX = k (dY - dB / count - xhat dScale / count),
    k = scale * invstd (the CPU kernel's float32 steps)."""
    dims = _dims(X, scale, saved_mean, saved_invstd)
    if dims is None or tuple(dY.shape) != tuple(X.shape) or np.dtype(dY.dtype) != np.float32:
        return None
    n, c, s = dims
    dev = device()
    gy, gx, gmean, ginv = on_gpu(dY), on_gpu(X), on_gpu(saved_mean), on_gpu(saved_invstd)
    dscale, db = dev.empty((c,)), dev.empty((c,))
    dev.grid("bn_grad_sums", (c, 1, 1), [gy, gx, gmean, ginv, dscale, db], [n, c, s])
    dx = None
    if ctx.wants(0):
        coef, dx = dev.empty((3 * c,)), dev.empty(X.shape)
        dev.dispatch("bn_grad_coef", c, [on_gpu(scale), ginv, dscale, db, coef], [c, 1.0 / (n * s)])
        dev.dispatch("bn_grad_x", dx.size, [gy, gx, gmean, ginv, coef, dx], [n, c, s])
    return (dx, dscale if ctx.wants(1) else None, db if ctx.wants(2) else None)
