"""An ungrouped 2-D stride-1 Conv with fewer output than input channels as one product per kernel tap
over the flat padded input, with no im2col copy.

With stride 1, tap ``(i, j)`` of output ``(r, s)`` reads padded input ``(r + i*dh, s + j*dw)``. On the
padded input flattened per channel (rows of width ``wp``) that is position ``r*wp + s`` shifted by
``i*dh*wp + j*dw``: so the output computed on the padded grid's width (``ho`` rows of ``wp``,
columns past ``wo`` read across into the next row and are dropped) is, per tap, one product
``W[:, :, i, j] (M, C) @ flat[n, :, off:off + ho*wp] (C, ho*wp)``, its operand a strided view that
BLAS reads in place. The taps' partial outputs are added up: ``K`` passes over ``(N, M, ho*wp)``
instead of im2col's copy of ``(N, C*K, L)``, fewer when M < C (DBNet's 3x3 smoothing convs, 32 -> 8
channels on 40x40 and 20x20 maps: 1.07 -> 0.68 and 0.59 -> 0.26 ms natively)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.ops.windows import Window


def suits(X: np.ndarray, W: np.ndarray, win: Window, group: int) -> bool:
    """Whether this Conv takes :func:`conv_taps`: 2-D, stride 1, ungrouped, M at most 2/3 of C,
    more than one tap and enough positions for the products to beat their calls."""
    c, m = X.shape[1], W.shape[0]
    return (group == 1 and win.rank == 2 and win.strides == (1, 1) and 3 * m <= 2 * c
            and win.kernel != (1, 1) and win.out_shape[0] * win.out_shape[1] >= 64)


def conv_taps(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window) -> np.ndarray:
    """Conv(X, W, B) over ``win`` (stride 1, group 1, 2-D) tap by tap; ``(N, M, ho, wo)``."""
    n, c = X.shape[0], X.shape[1]
    m = W.shape[0]
    (kh, kw), (dh, dw) = win.kernel, win.dilations
    (pt, pl), (h, wd) = win.pads_begin, win.in_shape
    hp, wp = win.padded_shape
    ho, wo = win.out_shape
    span = ho * wp
    # zeros around the input (its padding) and past the last row (read by the dropped columns)
    flat = np.zeros((n, c, hp * wp + (kw - 1) * dw), dtype=X.dtype)
    flat[:, :, :hp * wp].reshape(n, c, hp, wp)[:, :, pt:pt + h, pl:pl + wd] = X
    wt = np.ascontiguousarray(np.transpose(W, (2, 3, 0, 1))).astype(X.dtype, copy=False)  # (kh, kw, M, C)
    acc = tmp = None
    for i in range(kh):
        for j in range(kw):
            off = i * dh * wp + j * dw
            view = flat[:, :, off:off + span]
            if acc is None:
                acc = np.matmul(wt[i, j], view)  # (N, M, span)
            else:
                if tmp is None:
                    tmp = np.empty_like(acc)
                np.matmul(wt[i, j], view, out=tmp)
                acc += tmp
    y = acc.reshape(n, m, ho, wp)[:, :, :, :wo]
    out = np.empty((n, m, ho, wo), dtype=X.dtype)
    if B is None:
        out[...] = y
    else:
        np.add(y, B.astype(X.dtype, copy=False).reshape(m, 1, 1), out=out)
    return out
