"""Layer 3, ops: the WebGPU kernels of a CNN's step (shaders in web/gpu/shaders_nn.js): 2-D Conv and its gradient
(any number of groups: depthwise when it is the channel count), 2-D MaxPool with its indices and its gradient, and
Reshape/Flatten as views of the same buffer.
Each declines (returns None: the CPU kernel runs, see :mod:`pytrain.ops.webgpu.kernels`) what its shader
does not take; each sums in a fixed order, one thread per output element."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from pytrain.ops.nn.op_conv import conv_window
from pytrain.ops.registry import OpContext
from pytrain.ops.common import int_list
from pytrain.ops.shape.op_reshape import target_shape
from pytrain.ops.webgpu import GpuTensor, device, on_gpu
from pytrain.ops.windows import Window, geometry

_F32 = np.dtype(np.float32)


def window_params(win: Window) -> list:
    """The shaders' window: in h, w, out h, w, kernel h, w, strides, dilations, pads begin (2 each)."""
    return (list(win.in_shape) + list(win.out_shape) + list(win.kernel) + list(win.strides) + list(win.dilations)
            + list(win.pads_begin))


def _is_2d_float(*xs: Any) -> bool:
    return all(len(x.shape) == 4 and np.dtype(x.dtype) == _F32 for x in xs)


def conv(ctx: OpContext, X: Any, W: Any, B: Any = None, *, auto_pad: str = "NOTSET",
         dilations: Optional[Sequence[int]] = None, group: int = 1, kernel_shape: Optional[Sequence[int]] = None,
         pads: Optional[Sequence[int]] = None, strides: Optional[Sequence[int]] = None) -> Optional[Tuple[GpuTensor]]:
    """2-D Conv of ``group`` groups (depthwise when it is the channel count; the bias optional)."""
    if not _is_2d_float(X, W) or (B is not None and np.dtype(B.dtype) != _F32):
        return None
    win = conv_window(X, W, B, int(group), kernel_shape, strides, dilations, pads, auto_pad)
    n, c, m = X.shape[0], X.shape[1], W.shape[0]
    dev = device()
    y = dev.empty((n, m) + tuple(win.out_shape))
    dev.dispatch("conv2d", y.size, [on_gpu(X), on_gpu(W), None if B is None else on_gpu(B), y],
                 [n, c, m, int(B is not None)] + window_params(win) + [int(group)])
    return (y,)


def conv_grad(ctx: OpContext, dY: Any, X: Any, W: Any, *, auto_pad: str = "NOTSET",
              dilations: Optional[Sequence[int]] = None, group: int = 1, kernel_shape: Optional[Sequence[int]] = None,
              pads: Optional[Sequence[int]] = None, strides: Optional[Sequence[int]] = None) -> Optional[Tuple[Any, ...]]:
    """dX, dW, dB of a 2-D Conv of ``group`` groups (the outputs not wanted are not computed)."""
    if not _is_2d_float(dY, X, W):
        return None
    win = conv_window(X, W, None, int(group), kernel_shape, strides, dilations, pads, auto_pad)
    n, c, m = X.shape[0], X.shape[1], W.shape[0]
    if tuple(dY.shape) != (n, m) + tuple(win.out_shape):
        return None   # (the CPU kernel names the mismatch)
    dev = device()
    params = [n, c, m, 0] + window_params(win) + [int(group)]
    gy, gx, gw = on_gpu(dY), on_gpu(X), on_gpu(W)
    dx = dw = db = None
    if ctx.wants(0):
        dx = dev.empty(X.shape)
        dev.dispatch("conv2d_grad_x", dx.size, [gy, gw, dx], params)
    if ctx.wants(1):
        dw = dev.empty(W.shape)
        dev.dispatch("conv2d_grad_w", dw.size, [gy, gx, dw], params)
    if ctx.wants(2):
        db = dev.empty((m,))
        dev.dispatch("conv2d_grad_b", m, [gy, db], params)
    return (dx, dw, db)


def max_pool(ctx: OpContext, X: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
             dilations: Optional[Sequence[int]] = None, kernel_shape: Optional[Sequence[int]] = None,
             pads: Optional[Sequence[int]] = None, storage_order: int = 0,
             strides: Optional[Sequence[int]] = None) -> Optional[Tuple[Any, Any]]:
    """2-D MaxPool (row-major indices): the first maximum in scan order, as onnxruntime's."""
    if storage_order or not kernel_shape or len(kernel_shape) != 2 or not _is_2d_float(X):
        return None
    win = geometry("MaxPool", X.shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    n, c = X.shape[0], X.shape[1]
    dev = device()
    shape = (n, c) + tuple(win.out_shape)
    y = dev.empty(shape)
    idx = dev.empty(shape, np.int64) if ctx.wants(1) else None
    dev.dispatch("max_pool2d", y.size, [on_gpu(X), y, idx], [n, c, 0, int(idx is not None)] + window_params(win) + [1])
    return (y, idx)


def max_pool_grad(ctx: OpContext, dY: Any, Indices: Any, X: Any, *, storage_order: int = 0) -> Optional[Tuple[Any]]:
    """MaxPoolGrad of a 2-D MaxPool's row-major indices: each element of dX sums, in order, the dY whose
    index is it (indices stay within their (n, c) plane)."""
    if storage_order or not isinstance(Indices, GpuTensor) or not _is_2d_float(dY) or len(X.shape) != 4 \
            or tuple(Indices.shape) != tuple(dY.shape) or tuple(dY.shape[:2]) != tuple(X.shape[:2]):
        return None
    dev = device()
    dx = dev.empty(X.shape)
    planes = int(X.shape[0]) * int(X.shape[1])
    dev.dispatch("max_pool2d_grad", dx.size, [on_gpu(dY), Indices, dx],
                 [planes, int(X.shape[2]) * int(X.shape[3]), int(dY.shape[2]) * int(dY.shape[3])])
    return (dx,)


def _view(x: GpuTensor, shape: Sequence[int]) -> GpuTensor:
    """``x``'s buffer under another shape (no copy): the view keeps ``x`` alive."""
    v = GpuTensor(x.device, x.id, tuple(int(d) for d in shape), x.dtype)
    v.base = x
    if x.host is not None:   # (a fed batch's host copy stays readable by CPU kernels)
        v.host = x.host.reshape(v.shape)
    return v


def reshape(ctx: OpContext, data: Any, shape: Any, *, allowzero: int = 0) -> Optional[Tuple[GpuTensor]]:
    """Reshape of a GPU tensor by a shape on the CPU: a view."""
    if not isinstance(data, GpuTensor) or isinstance(shape, GpuTensor):
        return None
    return (_view(data, target_shape("Reshape", data.shape, int_list("Reshape", "shape", shape), allowzero)),)


def flatten(ctx: OpContext, input: Any, *, axis: int = 1) -> Optional[Tuple[GpuTensor]]:
    """Flatten of a GPU tensor: a view."""
    if not isinstance(input, GpuTensor):
        return None
    rank = len(input.shape)
    a = axis + rank if axis < 0 else axis
    if not 0 <= a <= rank:
        return None
    lead = int(np.prod(input.shape[:a], dtype=np.int64))
    return (_view(input, (lead, int(np.prod(input.shape[a:], dtype=np.int64)))),)
