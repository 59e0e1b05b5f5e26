"""FusedConv: Conv, then an inference-mode BatchNormalization, then optionally Clip, as one node.

Never in a model file: pytrain.fusion puts it in a plan in place of that chain when nothing else
reads the Conv's (or the BatchNormalization's) output, as in a frozen MobileNet backbone. The
normalisation is folded into the convolution, computed afresh on every call from whatever the
parameters are then (nothing is cached, so a BatchNormalization whose parameters change between
steps stays right):

    BN(conv(x, W) + B) = conv(x, W * a) + (B * a + b),  a = scale / sqrt(var + eps),  b = bias - mean * a

so the BatchNormalization's two passes over the activation vanish, and the Clip runs in place on
the convolution's fresh output. Results differ from the unfused chain by float32 rounding only
(onnxruntime folds the same way)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.ops.elementwise.op_clip import clip_bound, clip_into
from pytrain.ops.normalization.op_batchnorm import check_parameters, scale_shift
from pytrain.ops.nn.op_conv import conv_window, convolve
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, get_kernel, kernel


@kernel("FusedConv", domain=PYTRAIN_DOMAIN)
def fused_conv(ctx: OpContext, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], scale: np.ndarray,
               bias: np.ndarray, mean: np.ndarray, var: np.ndarray, clip_min: Optional[np.ndarray] = None,
               clip_max: Optional[np.ndarray] = None, *, auto_pad: str = "NOTSET", dilations=None,
               group: int = 1, kernel_shape=None, pads=None, strides=None, epsilon: float = 1e-5,
               clip: int = 0) -> tuple:
    """Y = Clip(BatchNormalization(Conv(X, W, B), scale, bias, mean, var)) with Conv's attributes,
    BatchNormalization's epsilon and, when ``clip`` is 1, Clip's bounds (a missing one is None)."""
    group = int(group)
    win = conv_window(X, W, B, group, kernel_shape, strides, dilations, pads, auto_pad)
    m = W.shape[0]
    # the Conv's output, the BatchNormalization's input, is (N, M, ...)
    check_parameters((X.shape[0], m) + win.out_shape, scale, bias, mean, var)
    a, b = scale_shift(W.dtype, scale, bias, mean, var, epsilon)
    w = W * a.reshape((m,) + (1,) * (W.ndim - 1))
    if B is not None:
        b = B * a + b
    b = b.astype(W.dtype, copy=False)
    lo = clip_bound("min", clip_min, X.dtype) if clip else None
    hi = clip_bound("max", clip_max, X.dtype) if clip else None
    info = get_kernel("Conv")
    if info.fn is not info.numpy_fn:  # an accelerated Conv (the browser's wasm kernels): through it
        y, = info.fn(ctx, X, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)
    else:
        y = convolve(X, w, b, win, group)  # (natively: no second pass over the checks)
    return (clip_into(y, y, lo, hi) if clip else y,)
