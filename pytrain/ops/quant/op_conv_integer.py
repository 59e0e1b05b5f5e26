"""ConvInteger (opset 10): Conv of ``x - x_zero_point`` by ``w - w_zero_point`` (8-bit integers, the
weight's zero point per tensor or per output channel), exactly, as int32; padding reads the zero point,
i.e. 0 after centring (onnxruntime pads with x_zero_point)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.nn.op_conv import conv_window, convolve
from pytrain.ops.quant.op_matmul_integer import centered
from pytrain.ops.registry import kernel


@kernel("ConvInteger", since=10)
def conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    op = "ConvInteger"
    wzp = w_zero_point
    per_channel = wzp is not None and wzp.size > 1
    if per_channel:
        if wzp.ndim != 1 or w.ndim < 1 or wzp.shape[0] != w.shape[0]:
            raise InputError("%s: w_zero_point must be a scalar or hold one value per output channel (%d), got "
                             "shape %s" % (op, w.shape[0] if w.ndim else 0, list(wzp.shape)))
        wzp = wzp.reshape((-1,) + (1,) * (w.ndim - 1))
    xc = centered(op, "x", x, x_zero_point, x_zero_point is None or x_zero_point.size == 1)
    wc = centered(op, "w", w, wzp, True)
    k = int(np.prod(w.shape[1:])) if w.ndim > 1 else 1
    bound = k * max(int(np.abs(xc).max()) if xc.size else 0, 1) * max(int(np.abs(wc).max()) if wc.size else 0, 1)
    ft = np.float32 if bound < (1 << 24) else np.float64
    X, W = xc.astype(ft), wc.astype(ft)
    win = conv_window(X, W, None, int(group), kernel_shape, strides, dilations, pads, auto_pad)
    return (np.rint(convolve(X, W, None, win, int(group))).astype(np.int32),)
