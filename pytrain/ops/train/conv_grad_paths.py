"""Conv's gradient in the cheaper exact forms that the forward Conv takes natively (issue 32).

The general ConvGrad (:mod:`op_conv_grad`) folds the batch into im2col columns: one product per
group. For a depthwise conv that is C products of one row each over a copied column matrix (25x
the activation for 5x5), numpy's slowest case (MobileNetV3's 5x5 depthwise grads took 10-25x their
forward). These forms keep the ``(N, C, *spatial)`` layout instead:

* depthwise 2-D (group == C == M): per kernel tap, ``dW[:, tap]`` is the sum over the batch and the
  output positions of ``dY`` times the tap's shifted input, and ``dX`` gets ``dY`` times the tap's
  weight added back at the tap's shift (:func:`depthwise_conv2d_grad`);
* ungrouped convs with many output positions per sample (1x1 expand/project convs, a first 3x3
  conv on a large image): per-sample products batch-first, as the forward's per-sample path
  (:func:`per_sample_conv_grad`).

Only natively (numpy's own products): the browser's wasm GEMM wants the one large product.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.ops.nn.op_conv import convolve
from pytrain.ops.windows import Window, geometry, pad_spatial, tap_slices, window_view

Grads = Tuple[Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]]


def _crop(dxp: np.ndarray, win: Window) -> np.ndarray:
    """The input's part of a padded-extent gradient (a view when nothing was padded)."""
    if not win.needs_padding:
        return dxp
    inner = tuple(slice(pb, pb + i) for i, pb in zip(win.in_shape, win.pads_begin))
    return np.ascontiguousarray(dxp[(slice(None), slice(None)) + inner])


def _padded_zeros(shape: Tuple[int, ...], win: Window, dtype: np.dtype) -> np.ndarray:
    return np.zeros(tuple(shape[:2]) + win.padded_shape, dtype=dtype)


def depthwise_conv2d_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, win: Window,
                          wants: Tuple[bool, bool, bool]) -> Grads:
    """dX, dW, dB (None where not wanted) of a 2-D depthwise Conv (W ``(C, 1, kh, kw)``, group == C).

    ``dW[c, tap]`` is ``cols[c, tap, :] @ dY[c, :]`` over the batch and positions, ``cols`` the
    window copy channel-major (one GEMV per channel); ``dX`` is the depthwise Conv of dY (spread
    to stride 1 when strided) with the flipped kernel, the forward's own fast kernels."""
    n, c = X.shape[0], X.shape[1]
    k = int(np.prod(win.kernel))
    positions = int(np.prod(win.out_shape))
    dX = dW = dB = None
    if wants[1]:
        # channel-major copies, so each channel's K x N*L product is one GEMV over the whole batch
        view = window_view(pad_spatial(X, win), win)  # (N, C, kh, kw, *out)
        cols = np.ascontiguousarray(view.transpose(1, 2, 3, 0, 4, 5)).reshape(c, k, n * positions)
        dyc = np.ascontiguousarray(dY.transpose(1, 0, 2, 3)).reshape(c, n * positions, 1)
        dW = np.matmul(cols, dyc).reshape(W.shape).astype(W.dtype, copy=False)
    if wants[0]:
        dX = _depthwise_input_grad(dY, X, W, win)
    if wants[2]:
        dB = dY.sum(axis=0).reshape(c, -1).sum(axis=1)
    return dX, dW, dB


def _depthwise_input_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, win: Window) -> np.ndarray:
    """dX of a depthwise Conv: the full correlation of dY (zeros between strided positions) with the
    flipped kernel, over just the input's extent."""
    n, c = X.shape[0], X.shape[1]
    spread = tuple((o - 1) * s + 1 for o, s in zip(win.out_shape, win.strides))
    begin = tuple((k - 1) * d - pb for k, d, pb in zip(win.kernel, win.dilations, win.pads_begin))
    end = tuple(i - sp - b + (k - 1) * d
                for i, sp, b, k, d in zip(win.in_shape, spread, begin, win.kernel, win.dilations))
    if min(begin + end) < 0:  # pads wider than the kernel's reach: add each tap back
        dxp = np.zeros((n, c) + win.padded_shape, dtype=X.dtype)
        wk = W.reshape(c, -1).astype(X.dtype, copy=False)
        for t, tap in enumerate(win.taps()):
            dxp[tap_slices(win, tap)] += dY * wk[:, t].reshape(1, c, 1, 1)
        return _crop(dxp, win)
    if any(s > 1 for s in win.strides):
        dys = np.zeros((n, c) + spread, dtype=dY.dtype)
        dys[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in win.strides)] = dY
        dY = dys
    flipped = np.ascontiguousarray(W[:, :, ::-1, ::-1]).astype(X.dtype, copy=False)
    full = geometry("ConvGrad", dY.shape, win.kernel, None, win.dilations, begin + end, "NOTSET")
    return convolve(dY, flipped, None, full, c)


def input_grad_as_conv(dY: np.ndarray, X: np.ndarray, W: np.ndarray, win: Window) -> Optional[np.ndarray]:
    """dX of an ungrouped stride-1 Conv as a Conv of dY with W's flipped transpose ``(C, M, *kernel)``
    (the full correlation over just the input's extent), or None where the pads reach past the
    kernel. Its im2col copies dY's M channels, not C: where M < C (DBNet's 32 -> 8 and 24 -> 16
    3x3 convs) that is C/M times less than the column gradient col2im adds back tap by tap."""
    if any(st != 1 for st in win.strides):
        return None
    begin = tuple((k - 1) * d - pb for k, d, pb in zip(win.kernel, win.dilations, win.pads_begin))
    end = tuple(i - o - b + (k - 1) * d
                for i, o, b, k, d in zip(win.in_shape, win.out_shape, begin, win.kernel, win.dilations))
    if min(begin + end) < 0:
        return None
    spatial = tuple(slice(None, None, -1) for _ in win.kernel)
    flipped = np.ascontiguousarray(np.swapaxes(W, 0, 1)[(slice(None), slice(None)) + spatial])
    full = geometry("ConvGrad", dY.shape, win.kernel, None, win.dilations, begin + end, "NOTSET")
    return convolve(dY, flipped.astype(X.dtype, copy=False), None, full, 1).astype(X.dtype, copy=False)


def per_sample_conv_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, win: Window,
                         wants: Tuple[bool, bool, bool]) -> Grads:
    """dX, dW, dB of an ungrouped Conv as per-sample products in the ``(N, C, *spatial)`` layout:
    ``dW = sum_n dY[n] @ cols[n]^T``, ``dcols = W^T @ dY[n]`` added back tap by tap (col2im)."""
    n, c, m = X.shape[0], X.shape[1], W.shape[0]
    positions = int(np.prod(win.out_shape))
    pointwise = (all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides)
                 and not win.needs_padding)
    dy = dY.reshape(n, m, positions)
    dX = dW = dB = None
    if wants[1]:
        if pointwise:
            cols = X.reshape(n, c, positions)
        else:
            cols = window_view(pad_spatial(X, win), win).reshape(n, -1, positions)  # (N, C*K, L)
        dW = np.matmul(dy, cols.transpose(0, 2, 1)).sum(axis=0).reshape(W.shape).astype(W.dtype, copy=False)
    if wants[0] and not pointwise and m < c:
        dX = input_grad_as_conv(dY, X, W, win)
    if wants[0] and dX is None:
        dcols = np.matmul(W.reshape(m, -1).T.astype(X.dtype, copy=False), dy)  # (N, C*K, L)
        if pointwise:
            dX = dcols.reshape(X.shape)
        else:
            d = dcols.reshape((n, c) + win.kernel + win.out_shape)
            dxp = _padded_zeros(X.shape, win, X.dtype)
            for tap in win.taps():
                dxp[tap_slices(win, tap)] += d[(slice(None), slice(None)) + tuple(tap)]
            dX = _crop(dxp, win)
    if wants[2]:
        dB = dy.sum(axis=(0, 2))
    return dX, dW, dB



def pointwise_folded_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, win: Window,
                          wants: Tuple[bool, bool, bool]) -> Grads:
    """dX, dW, dB of a 1x1 unit-stride unpadded Conv over few positions per sample (squeeze-excite's
    convs), the batch folded into the products: ``dW = dY (M, N*L) @ X (N*L, C)``, ``dX = W^T @ dY``."""
    n, c, m = X.shape[0], X.shape[1], W.shape[0]
    w = W.reshape(m, c).astype(X.dtype, copy=False)
    if X.size == n * c:  # one position: plain (N, C) / (N, M) matrices
        x2, dy2 = X.reshape(n, c), dY.reshape(n, m)
        dW = np.matmul(dy2.T, x2).reshape(W.shape).astype(W.dtype, copy=False) if wants[1] else None
        dX = np.matmul(dy2, w).reshape(X.shape) if wants[0] else None
        return dX, dW, (dy2.sum(axis=0) if wants[2] else None)
    dy = dY.reshape(n, m, -1)
    dX = dW = None
    if wants[1]:
        x2 = X.reshape(n, c, -1).transpose(0, 2, 1).reshape(-1, c)  # (N*L, C)
        dy2 = dy.transpose(1, 0, 2).reshape(m, -1)  # (M, N*L)
        dW = np.matmul(dy2, x2).reshape(W.shape).astype(W.dtype, copy=False)
    if wants[0]:
        dX = np.matmul(w.T, dy).reshape(X.shape)  # (N, C, L)
    return dX, dW, (dy.sum(axis=(0, 2)) if wants[2] else None)
