"""ConvGrad: gradients of Conv (1-D, 2-D, N-D; strides, pads, auto_pad, dilations, groups).

Conv is Y = W @ cols(X) per group, cols being the im2col matrix of the padded input. So
dW = dY @ cols^T, dcols = W^T @ dY, and dX is col2im(dcols): each kernel tap adds its slice back.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.nn.depthwise import depthwise_dense_grad, suits
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.conv_grad_paths import (depthwise_conv2d_grad, per_sample_conv_grad,
                                                pointwise_folded_grad)
from pytrain.ops.windows import Window, batch_last, conv_columns, conv_columns_adjoint, geometry


@kernel("ConvGrad", domain=PYTRAIN_DOMAIN)
def conv_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, W: np.ndarray, *, auto_pad: str = "NOTSET",
              dilations: Optional[Sequence[int]] = None, group: int = 1,
              kernel_shape: Optional[Sequence[int]] = None, pads: Optional[Sequence[int]] = None,
              strides: Optional[Sequence[int]] = None) -> tuple:
    """dX, dW, dB of Conv(X, W, B) given dY; dB = sum of dY over N and the spatial axes."""
    op = "ConvGrad node %r" % ctx.node_name
    if X.ndim < 3 or W.ndim != X.ndim:
        raise InputError("%s: X %s and W %s must be (N, C, d1, ...) and (M, C/group, k1, ...) of the "
                         "same rank >= 3" % (op, X.shape, W.shape))
    n, c = X.shape[0], X.shape[1]
    m, cg = W.shape[0], W.shape[1]
    g = int(group)
    if g < 1 or m % g or cg * g != c:
        raise InputError("%s: X has %d channels and W shape %s; with group=%d W.shape[1] must be C/group "
                         "and M divisible by group" % (op, c, W.shape, g))
    ks = list(kernel_shape) if kernel_shape else list(W.shape[2:])
    if tuple(ks) != tuple(W.shape[2:]):
        raise InputError("%s: kernel_shape %s does not match W's spatial shape %s" % (op, ks, W.shape[2:]))
    win = geometry(op, X.shape, ks, strides, dilations, pads, auto_pad)
    if dY.shape != (n, m) + win.out_shape:
        raise InputError("%s: dY has shape %s, expected Conv's output shape %s"
                         % (op, dY.shape, (n, m) + win.out_shape))

    fast = _native_form(X, W, win, g)
    grads = fast(dY, X, W, win, (ctx.wants(0), ctx.wants(1), ctx.wants(2))) if fast is not None else None
    if grads is not None:  # (the dense depthwise form declines non-finite values: the general form below)
        return grads
    # Channels first and the batch folded into the columns: one matmul per group covers all of N.
    dy = batch_last(dY).reshape(g, m // g, -1)  # (M, *out, N) as (G, M/G, L*N)
    dX = dW = dB = None
    if ctx.wants(1):
        cols = conv_columns(X, win, g)  # (G, C/G*K, L*N)
        dW = linalg.matmul(dy, np.swapaxes(cols, 1, 2)).reshape(W.shape).astype(W.dtype, copy=False)
    if ctx.wants(0):
        dcols = linalg.matmul(np.swapaxes(W.reshape(g, m // g, -1), 1, 2), dy)  # (G, C/G*K, L*N)
        dX = conv_columns_adjoint(dcols, win, X.shape).astype(X.dtype, copy=False)
    if ctx.wants(2):
        dB = np.sum(dy.reshape(m, -1), axis=1)  # contiguous rows: over N and the spatial axes
    return (dX, dW, dB)


#: per-sample products win from these many output positions per sample (1x1 / other ungrouped
#: convs; measured natively on MobileNetV3's and DBNet's layers, as the forward's thresholds)
_POINTWISE_MIN_POSITIONS = 32
_PER_SAMPLE_MIN_POSITIONS = 1024


def _native_form(X: np.ndarray, W: np.ndarray, win: Window, g: int) -> Optional[Callable[..., tuple]]:
    """The cheaper exact form of this ConvGrad natively (:mod:`conv_grad_paths`), or None."""
    if linalg.has_backend() or X.dtype.kind != "f":
        return None
    c, m = X.shape[1], W.shape[0]
    if g == c and W.shape[1] == 1 and suits(win):
        return depthwise_dense_grad
    if g == c == m and W.shape[1] == 1 and win.rank == 2:
        return depthwise_conv2d_grad
    if g == 1:
        positions = int(np.prod(win.out_shape))
        pointwise = all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides) and not win.needs_padding
        strided = any(s > 1 for s in win.strides)  # col2im's strided adds in the batch-last layout are
        # slow: DBNet's stride-2 3x3 grads on 40x40 and 20x20 inputs 2-3x faster per sample
        if pointwise and positions < _POINTWISE_MIN_POSITIONS:
            return pointwise_folded_grad
        if strided or positions >= (_POINTWISE_MIN_POSITIONS if pointwise else _PER_SAMPLE_MIN_POSITIONS):
            return per_sample_conv_grad
        if not pointwise and m < c:  # dX as a Conv of dY's fewer channels (DBNet's 32 -> 8 on 20x20
            return per_sample_conv_grad  # and 10x10: 1.0 -> 0.65 and 0.48 -> 0.36 ms alone)
    return None
