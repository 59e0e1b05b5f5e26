"""Layer 3, ops: the WebGPU kernels a MobileNet's step adds to the CNN's (shaders in web/gpu/shaders_nn.js):
BatchNormalization on running statistics (inference form, a frozen backbone's) and its gradient, Clip with scalar
bounds (ReLU6) and its gradient, GlobalAveragePool and 2-D AveragePool with their gradients (Dropout and Sum: :mod:`.text`). Each declines (returns None: the CPU kernel runs, see
:mod:`pytrain.ops.webgpu.kernels`) what its shader does not take; each sums in a fixed order."""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from pytrain.ops.registry import OpContext
from pytrain.ops.webgpu import GpuTensor, device, on_gpu
from pytrain.ops.webgpu.conv import window_params
from pytrain.ops.windows import Window, avg_divisor, geometry

_F32 = np.dtype(np.float32)


def channels(X: Any, *per_channel: Any) -> Optional[Tuple[int, int, int]]:
    """(n, c, spatial size) of a float32 (N, C, ...) ``X`` whose per-channel tensors are float32 (C,)."""
    if len(X.shape) < 2 or np.dtype(X.dtype) != _F32:
        return None
    n, c = int(X.shape[0]), int(X.shape[1])
    if any(t is None or tuple(t.shape) != (c,) or np.dtype(t.dtype) != _F32 for t in per_channel):
        return None
    return n, c, int(np.prod(X.shape[2:], dtype=np.int64)) if len(X.shape) > 2 else 1


def batch_normalization(ctx: OpContext, X: Any, scale: Any, B: Any, input_mean: Any, input_var: Any, *,
                        epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0,
                        spatial: int = 1) -> Optional[Tuple[GpuTensor]]:
    """Inference-mode BatchNormalization: y = x * a + b per channel, a = scale / sqrt(var + eps),
    b = B - mean * a (the numpy kernel's per-channel forms)."""
    dims = channels(X, scale, B, input_mean, input_var)
    if training_mode or not spatial or dims is None:
        return None
    dev = device()
    y = dev.empty(X.shape)
    dev.dispatch("batchnorm", y.size, [on_gpu(X), on_gpu(scale), on_gpu(B), on_gpu(input_mean), on_gpu(input_var), y],
                 list(dims) + [float(np.float32(epsilon))])
    return (y,)


def batchnorm_inference_grad(ctx: OpContext, dY: Any, X: Any, scale: Any, mean: Any, var: Any, *,
                             epsilon: float = 1e-5) -> Optional[Tuple[Any, Any, Any]]:
    """BatchNormInferenceGrad: dX = dY * scale * invstd; dScale = sum dY * (x - mean) * invstd, dB = sum dY
    (over every axis but the channels, in order)."""
    dims = channels(X, scale, mean, var)
    if dims is None or tuple(dY.shape) != tuple(X.shape) or np.dtype(dY.dtype) != _F32:
        return None
    dev = device()
    params = list(dims) + [float(np.float32(epsilon))]
    gy, gvar = on_gpu(dY), on_gpu(var)
    dx = dscale = db = None
    if ctx.wants(0):
        dx = dev.empty(X.shape)
        dev.dispatch("batchnorm_grad_x", dx.size, [gy, on_gpu(scale), gvar, dx], params)
    if ctx.wants(1) or ctx.wants(2):
        dscale, db = dev.empty((dims[1],)), dev.empty((dims[1],))
        dev.dispatch("batchnorm_grad_params", dims[1], [gy, on_gpu(X), on_gpu(mean), gvar, dscale, db], params)
    return (dx, dscale if ctx.wants(1) else None, db if ctx.wants(2) else None)


def _bounds(lo: Any, hi: Any) -> Optional[list]:
    """Clip's bounds as shader parameters (lo, hi, has lo, has hi): CPU scalars only."""
    out = []
    for v in (lo, hi):
        if isinstance(v, GpuTensor) or (v is not None and np.asarray(v).size != 1):
            return None
    for v, default in ((lo, -math.inf), (hi, math.inf)):
        out.append(default if v is None else float(np.asarray(v).reshape(()).astype(np.float32)))
    if any(b != b for b in out):
        return None   # (a NaN bound: the CPU kernel's NaNs)
    return out + [int(lo is not None), int(hi is not None)]


def clip(ctx: OpContext, input: Any, min: Any = None, max: Any = None, **legacy: Any) -> Optional[Tuple[GpuTensor]]:
    """Clip of float32 by scalar bounds given as inputs: min(max(x, lo), hi) (ReLU6)."""
    b = _bounds(min, max)
    if legacy or b is None or np.dtype(input.dtype) != _F32:
        return None
    dev = device()
    y = dev.empty(input.shape)
    dev.dispatch("clip", y.size, [on_gpu(input), y], [y.size] + b)
    return (y,)


def clip_grad(ctx: OpContext, dY: Any, X: Any, lo: Any = None, hi: Any = None) -> Optional[Tuple[GpuTensor]]:
    """ClipGrad: dY where lo <= x <= hi (bounds inclusive), else 0 (selected, never multiplied)."""
    b = _bounds(lo, hi)
    if b is None or tuple(dY.shape) != tuple(X.shape) or np.dtype(dY.dtype) != _F32 or np.dtype(X.dtype) != _F32:
        return None
    dev = device()
    dx = dev.empty(X.shape)
    dev.dispatch("clip_grad", dx.size, [on_gpu(dY), on_gpu(X), dx], [dx.size] + b)
    return (dx,)


def global_average_pool(ctx: OpContext, X: Any) -> Optional[Tuple[GpuTensor]]:
    """GlobalAveragePool: each (n, c) plane summed in order, times 1 / its size."""
    if len(X.shape) < 3 or np.dtype(X.dtype) != _F32:
        return None
    planes, size = int(X.shape[0]) * int(X.shape[1]), int(np.prod(X.shape[2:], dtype=np.int64))
    if size == 0:
        return None
    dev = device()
    y = dev.empty(tuple(X.shape[:2]) + (1,) * (len(X.shape) - 2))
    dev.dispatch("reduce_sum", planes, [on_gpu(X), y], [planes, size, 1, 1.0 / size])
    return (y,)


def global_average_pool_grad(ctx: OpContext, dY: Any, X: Any) -> Optional[Tuple[GpuTensor]]:
    """GlobalAveragePoolGrad: dY broadcast over each plane, times 1 / its size."""
    if len(X.shape) < 3 or np.dtype(dY.dtype) != _F32 or int(np.prod(dY.shape, dtype=np.int64)) != \
            int(X.shape[0]) * int(X.shape[1]):
        return None
    size = int(np.prod(X.shape[2:], dtype=np.int64))
    dev = device()
    dx = dev.empty(X.shape)
    dev.dispatch("plane_scale", dx.size, [on_gpu(dY), dx], [dx.size, size, 1.0 / max(size, 1)])
    return (dx,)


_DIVISORS: Dict[Tuple[Any, ...], np.ndarray] = {}


def _divisor(win: Window, count_include_pad: int) -> np.ndarray:
    """AveragePool's divisor per output position (float32, read-only: uploaded once as a constant)."""
    key = tuple(window_params(win)) + (int(count_include_pad),)
    div = _DIVISORS.get(key)
    if div is None:
        div = np.ascontiguousarray(avg_divisor(win, count_include_pad), dtype=np.float32)
        div.flags.writeable = False
        _DIVISORS[key] = div
    return div


def _pool_window(X: Any, kernel_shape: Optional[Sequence[int]], strides: Any, dilations: Any, pads: Any,
                 auto_pad: str, ceil_mode: int) -> Optional[Window]:
    if not kernel_shape or len(kernel_shape) != 2 or len(X.shape) != 4 or np.dtype(X.dtype) != _F32:
        return None
    return geometry("AveragePool", X.shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)


def average_pool(ctx: OpContext, X: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                 dilations: Optional[Sequence[int]] = None, kernel_shape: Optional[Sequence[int]] = None,
                 pads: Optional[Sequence[int]] = None,
                 strides: Optional[Sequence[int]] = None) -> Optional[Tuple[GpuTensor]]:
    """2-D AveragePool: each window's elements summed in (kh, kw) order, divided by onnxruntime's count."""
    win = _pool_window(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if win is None:
        return None
    n, c = int(X.shape[0]), int(X.shape[1])
    dev = device()
    y = dev.empty((n, c) + tuple(win.out_shape))
    dev.dispatch("avg_pool2d", y.size, [on_gpu(X), dev.constant(_divisor(win, count_include_pad)), y],
                 [n, c, 0, 0] + window_params(win) + [1])
    return (y,)


def average_pool_grad(ctx: OpContext, dY: Any, X: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                      count_include_pad: int = 0, dilations: Optional[Sequence[int]] = None,
                      kernel_shape: Optional[Sequence[int]] = None, pads: Optional[Sequence[int]] = None,
                      strides: Optional[Sequence[int]] = None) -> Optional[Tuple[GpuTensor]]:
    """AveragePoolGrad: each input element sums, in (kh, kw) order, dY / divisor of the windows holding it."""
    win = _pool_window(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if win is None or np.dtype(dY.dtype) != _F32 or tuple(dY.shape) != tuple(X.shape[:2]) + tuple(win.out_shape):
        return None
    n, c = int(X.shape[0]), int(X.shape[1])
    dev = device()
    dx = dev.empty(X.shape)
    dev.dispatch("avg_pool2d_grad", dx.size, [on_gpu(dY), dev.constant(_divisor(win, count_include_pad)), dx],
                 [n, c, 0, 0] + window_params(win) + [1])
    return (dx,)
