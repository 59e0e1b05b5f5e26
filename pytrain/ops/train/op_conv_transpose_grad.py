"""ConvTransposeGrad: gradients of ConvTranspose (1-D, 2-D, N-D; every ConvTranspose attribute).

ConvTranspose is ``Y = crop(col2im(W^T @ X))`` per group, the adjoint of a Conv over the full
extent. Its adjoint is that Conv: with ``dF`` = dY put back into the full extent (zeros where the
pads cropped), ``cols = im2col(dF)`` and

* ``dX = W @ cols``         (the Conv of dF with W, which maps M channels to C),
* ``dW = X @ cols^T``       (ConvGrad's dW with the roles of input and output gradient swapped),
* ``dB = sum of dY`` over N and the spatial axes.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.nn.op_conv_transpose import shift_spatial, transpose_geometry
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.windows import batch_first, batch_last, conv_columns, window_view


@kernel("ConvTransposeGrad", domain=PYTRAIN_DOMAIN)
def conv_transpose_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, W: np.ndarray, *,
                        auto_pad: str = "NOTSET", dilations: Optional[Sequence[int]] = None, group: int = 1,
                        kernel_shape: Optional[Sequence[int]] = None,
                        output_padding: Optional[Sequence[int]] = None,
                        output_shape: Optional[Sequence[int]] = None, pads: Optional[Sequence[int]] = None,
                        strides: Optional[Sequence[int]] = None) -> tuple:
    """dX, dW, dB of ConvTranspose(X, W, B) given dY."""
    op = "ConvTransposeGrad node %r" % ctx.node_name
    geo = transpose_geometry(op, X.shape, W.shape, auto_pad, dilations, group, kernel_shape, output_padding,
                             output_shape, pads, strides)
    g, n, c, m = geo.group, X.shape[0], X.shape[1], geo.m
    if dY.shape != (n, m) + geo.out_shape:
        raise InputError("%s: dY has shape %s, expected ConvTranspose's output shape %s"
                         % (op, dY.shape, (n, m) + geo.out_shape))
    dX = dW = dB = None
    if (ctx.wants(0) or ctx.wants(1)) and g == 1 and X.dtype.kind == "f" and not linalg.has_backend():
        d_full = shift_spatial(dY, geo.full_shape, tuple(-p for p in geo.pads_begin))
        # natively, batch-first per-sample products (as ConvGrad's conv_grad_paths): no transposes
        positions = int(np.prod(geo.win.out_shape))
        cols = window_view(d_full, geo.win).reshape(n, -1, positions)  # (N, M*K, L)
        if ctx.wants(0):
            dX = np.matmul(W.reshape(c, -1).astype(X.dtype, copy=False), cols).reshape(X.shape)
        if ctx.wants(1):
            dW = np.matmul(X.reshape(n, c, positions), cols.transpose(0, 2, 1)).sum(axis=0)
            dW = dW.reshape(W.shape).astype(W.dtype, copy=False)
    elif ctx.wants(0) or ctx.wants(1):
        d_full = shift_spatial(dY, geo.full_shape, tuple(-p for p in geo.pads_begin))
        cols = conv_columns(d_full, geo.win, g)  # (G, M/G*K, L*N), L = X's spatial size
        if ctx.wants(0):
            dx = linalg.matmul(W.reshape(g, c // g, -1), cols)  # (G, C/G, L*N)
            dX = batch_first(np.asarray(dx, dtype=X.dtype).reshape((c,) + geo.win.out_shape + (n,)))
        if ctx.wants(1):
            x = batch_last(X).reshape(g, c // g, -1)  # (G, C/G, L*N)
            dW = linalg.matmul(x, np.swapaxes(cols, 1, 2)).reshape(W.shape).astype(W.dtype, copy=False)
    if ctx.wants(2):
        dB = dY.sum(axis=0).reshape(m, -1).sum(axis=1)
    return (dX, dW, dB)
