"""Depthwise convolutions over small spatial extents as one dense operator per channel.

A depthwise Conv (group == C, W ``(C*m, 1, *kernel)``: ``m`` outputs per input channel) is, per output
channel ``o`` reading input channel ``c = o // m``, a linear map of that channel's positions:
``Y[n, o, :] = X[n, c, :] @ T_o`` with ``T_o[p, q] = W[o, tap]`` when input position ``p`` is tap
``tap`` of output position ``q`` (strides, dilations and padding included: a padded position is no
row at all), else 0. On MobileNetV3's late blocks (5x5 kernels on 3x12 and 2x6 maps) im2col copied
the input 25 times for C one-row products; ``T`` is at most a few times denser than the taps and
turns the work into C (or C*m) small BLAS products read straight from the ``(N, C, L)`` layout.

The tap of every (input, output) position pair depends on the window alone and is built once per
geometry (:func:`_taps`); ``T`` itself is gathered from the weights on every call (nothing cached, so
weights that train stay right). The gradients are the same products transposed:
``dX[n, c] = sum_j dY[n, c*m+j] @ T_{c*m+j}^T`` and ``dW[o, tap]`` sums ``X[:, c]^T @ dY[:, o]`` over
the pairs of that tap (one product with a 0/1 pair-to-tap matrix).
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Optional, Tuple

import numpy as np

from pytrain.ops.windows import Window

#: the dense operators are used while they cost at most this many times the taps' multiply-adds and
#: hold at most this many elements per channel (measured natively on MobileNetV3's depthwise layers;
#: past these the shifted-tap and im2col forms win)
_MAX_DENSITY = 6.0
_MAX_PAIRS = 8192


def suits(win: Window) -> bool:
    """Whether the dense per-channel operator is the cheaper form for this window."""
    pairs = math.prod(win.in_shape) * math.prod(win.out_shape)
    taps = math.prod(win.out_shape) * math.prod(win.kernel)
    return 0 < pairs <= _MAX_PAIRS and pairs <= _MAX_DENSITY * taps


@functools.lru_cache(maxsize=256)
def _taps(win_key: tuple) -> Tuple[np.ndarray, np.ndarray]:
    """``(L_in, L_out)`` tap index of each position pair (K where no tap links them), and the
    ``(L_in * L_out, K)`` 0/1 matrix sending each pair to its tap (for dW)."""
    in_shape, out_shape, kernel, strides, dilations, pads_begin = win_key
    k = math.prod(kernel)
    idx = np.full(in_shape + out_shape, k, dtype=np.intp)
    for t, tap in enumerate(itertools.product(*[range(d) for d in kernel])):
        sel_in, sel_out = [], []
        for i, o, kk, s, d, pb in zip(in_shape, out_shape, tap, strides, dilations, pads_begin):
            outs = np.arange(o)
            ins = outs * s + kk * d - pb
            ok = (ins >= 0) & (ins < i)
            sel_in.append(ins[ok])
            sel_out.append(outs[ok])
        if all(len(a) for a in sel_in):
            idx[_pairs(sel_in, sel_out)] = t
    idx = idx.reshape(math.prod(in_shape), math.prod(out_shape))
    onehot = np.zeros((idx.size, k + 1), dtype=np.float32)
    onehot[np.arange(idx.size), idx.reshape(-1)] = 1
    onehot = onehot[:, :k]
    idx.setflags(write=False)  # (shared by every call of this geometry)
    onehot.setflags(write=False)
    return idx, onehot


def _pairs(sel_in: list, sel_out: list) -> tuple:
    """Index arrays of one tap's (input, output) position pairs: on axis ``a`` input ``sel_in[a][j]``
    pairs with output ``sel_out[a][j]``, and the axes combine independently."""
    rank = len(sel_in)
    mesh = np.meshgrid(*[np.arange(len(a)) for a in sel_in], indexing="ij")
    return tuple(sel_in[a][mesh[a]] for a in range(rank)) + tuple(sel_out[a][mesh[a]] for a in range(rank))


def _key(win: Window) -> tuple:
    return (win.in_shape, win.out_shape, win.kernel, win.strides, win.dilations, win.pads_begin)


def dense_operators(W: np.ndarray, win: Window, dtype: np.dtype) -> np.ndarray:
    """``T`` of every output channel, ``(C*m, L_in, L_out)``."""
    idx, _ = _taps(_key(win))
    o = W.shape[0]
    wz = np.zeros((o, math.prod(win.kernel) + 1), dtype=dtype)  # the last column: no tap
    wz[:, :-1] = W.reshape(o, -1)
    return np.take(wz, idx, axis=1)


def _finite(a: np.ndarray) -> bool:
    # one pass over the result: a NaN or infinity anywhere makes the sum non-finite (a finite sum
    # that overflows only sends the call to the exact form too)
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(a.sum()))


def depthwise_dense(X: np.ndarray, W: np.ndarray, win: Window, B: Optional[np.ndarray],
                    operators: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """Conv(X, W, B) with group == C (W ``(C*m, 1, *kernel)``) as per-channel dense products, or None
    when the result is not finite: ``T``'s zeros would spread a NaN or infinity of X (0 * inf is NaN)
    over its whole channel, where the taps keep it inside the windows that read it. ``operators``:
    :func:`dense_operators` of W for ``win`` if the caller has them."""
    n, c = X.shape[0], X.shape[1]
    o = W.shape[0]
    mult = o // c
    lin, lout = math.prod(win.in_shape), math.prod(win.out_shape)
    T = (dense_operators(W, win, X.dtype) if operators is None else operators).reshape(c, mult, lin, lout)
    y = np.empty((n, c, mult, lout), dtype=X.dtype)
    xs = X.reshape(n, c, 1, lin).transpose(1, 2, 0, 3)  # (C, 1, N, L_in): a view, rows contiguous
    with np.errstate(invalid="ignore", over="ignore"):  # (a non-finite result is declined below)
        np.matmul(xs, T, out=y.transpose(1, 2, 0, 3))
    if not _finite(y):
        return None
    if B is not None:
        y += B.astype(X.dtype, copy=False).reshape(c, mult, 1)
    return y.reshape((n, o) + win.out_shape)


def depthwise_dense_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, win: Window,
                         wants: Tuple[bool, bool, bool]) -> tuple:
    """dX, dW, dB (None where not wanted) of :func:`depthwise_dense`'s Conv, or None when dX or dW is
    not finite (as :func:`depthwise_dense`: the exact forms then say where)."""
    n, c = X.shape[0], X.shape[1]
    o = W.shape[0]
    mult = o // c
    lin, lout = math.prod(win.in_shape), math.prod(win.out_shape)
    dy = dY.reshape(n, c, mult, lout).transpose(1, 2, 0, 3)  # (C, m, N, L_out)
    dX = dW = dB = None
    if wants[0]:
        T = dense_operators(W, win, X.dtype).reshape(c, mult, lin, lout)
        with np.errstate(invalid="ignore", over="ignore"):
            dx = np.matmul(dy, T.transpose(0, 1, 3, 2))  # (C, m, N, L_in)
        dX = np.ascontiguousarray((dx[:, 0] if mult == 1 else dx.sum(axis=1)).transpose(1, 0, 2))
        dX = dX.reshape(X.shape)
    if wants[1]:
        _, onehot = _taps(_key(win))
        xs = X.reshape(n, c, 1, lin).transpose(1, 2, 3, 0)  # (C, 1, L_in, N)
        with np.errstate(invalid="ignore", over="ignore"):
            pairs = np.matmul(xs, dy).reshape(o, lin * lout)  # (C*m, L_in * L_out)
            dW = np.matmul(pairs, onehot.astype(pairs.dtype, copy=False))
        dW = dW.reshape(W.shape).astype(W.dtype, copy=False)
    if any(g is not None and not _finite(g) for g in (dX, dW)):
        return None
    if wants[2]:
        dB = dY.reshape(n, o, lout).sum(axis=(0, 2))
    return dX, dW, dB
