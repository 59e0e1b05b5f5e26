"""Conv (1-D, 2-D and N-D; strides, pads, auto_pad, dilations, groups) as one matmul per group over
the strided window view of the padded input (im2col with the batch folded into the columns).
Natively, 1x1 convs, depthwise convs and large ungrouped ones take cheaper exact forms
(:func:`native_form`, kept per input shape by :func:`conv_plan`: MobileNetV2's frozen backbone, issue 14)."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.nn import conv_taps
from pytrain.ops.nn.depthwise import dense_operators, depthwise_dense, suits
from pytrain.ops.registry import kernel
from pytrain.ops.windows import (Window, batch_first, conv_columns, depthwise_conv2d, geometry, pad_spatial,
                                 window_view)

#: below these many output positions per sample the batch-folded im2col GEMM wins (measured natively
#: on MobileNetV2's layers: a 1x1 conv on 6x6 is 2x faster per sample, on 3x3 no faster); the
#: depthwise taps count input positions: as one BLAS product per channel over its taps' columns they
#: win over im2col from 8x8 inputs on (MobileNetV3's 48 channels, 6x24 3x3: 0.49 -> 0.3-0.4 ms)
_POINTWISE_MIN_POSITIONS = 32
_DEPTHWISE_MIN_POSITIONS = 64
#: a full conv over this many output positions per sample does its im2col per sample, batch-first
#: (MobileNet's first conv, 48x48 outputs: 2x faster; LeNet's 24x24 ones: no faster)
_PER_SAMPLE_MIN_POSITIONS = 1024
#: ... and a strided one from this many: the batch-last copies of the folded form then gather runs of
#: N elements (DBNet's stride-2 convs at batch 2, 16->32 on 40x40 and 32->64 on 20x20: 0.78 -> 0.21
#: and 0.62 -> 0.27 ms; batch 8: x0.6-0.8; below 5x5 outputs at batch 8 no faster)
_PER_SAMPLE_STRIDED_MIN_POSITIONS = 25


def _native_products() -> bool:
    # The fast paths below use numpy's own matmul/elementwise loops; where linalg has a product
    # backend (the browser's wasm GEMM, numpy without BLAS) the batch-folded GEMM is the fast path.
    return not linalg.has_backend()


def native_form(X: np.ndarray, W: np.ndarray, win: Window, group: int, dense: bool = True) -> Optional[Callable]:
    """The Conv's cheaper exact form natively, ``form(X, W, B, win, operators) -> Y or None``, or None
    for the batch-folded im2col; it depends on shapes, dtype and window only, so a caller may keep it
    per geometry (:func:`conv_plan`).

    * 1x1, stride 1, no padding: a per-sample product ``W (M, C) @ X[n] (C, L)``, already in
      ``(N, M, L)`` order: no column matrix and no transposes (MobileNet's expand/project convs);
      over few positions one product ``W @ X`` with the batch moved into the columns (a single
      position, squeeze-excite's convs: ``X (N, C) @ W.T``), with none of im2col's set-up;
    * depthwise (group == C, any multiplier) over small maps: one dense operator per channel
      (:mod:`pytrain.ops.nn.depthwise`; ``dense`` False skips it); over larger 2-D maps (group == C == M)
      :func:`depthwise_conv2d`, the taps as shifted planes;
    * ungrouped 2-D stride-1 convs with fewer outputs than inputs: one product per tap over the
      flat padded input (:mod:`pytrain.ops.nn.conv_taps`);
    * other ungrouped convs with large outputs, or strided ones: im2col per sample, products batch-first."""
    n, c = X.shape[0], X.shape[1]
    m = W.shape[0]
    if X.dtype.kind != "f":
        return None
    if group == 1 and X.size == n * c and W.size == m * c and not win.needs_padding:
        return _single_position  # (checked first: squeeze-excite's convs are many and tiny)
    if dense and group == c and W.shape[1] == 1 and suits(win):
        return _dense_depthwise
    if (group == c == m and W.shape[1] == 1 and win.rank == 2
            and math.prod(win.in_shape) >= _DEPTHWISE_MIN_POSITIONS):
        return _depthwise_taps
    if conv_taps.suits(X, W, win, group):
        return _conv_taps
    positions = math.prod(win.out_shape)
    pointwise = (group == 1 and all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides)
                 and not win.needs_padding)
    if pointwise:
        return _pointwise_folded if positions < _POINTWISE_MIN_POSITIONS else _pointwise
    if group == 1 and (positions >= _PER_SAMPLE_MIN_POSITIONS or (
            positions >= _PER_SAMPLE_STRIDED_MIN_POSITIONS and any(s > 1 for s in win.strides))):
        return _per_sample_columns
    return None


def _dense_depthwise(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window,
                     operators: Optional[np.ndarray]) -> Optional[np.ndarray]:
    y = depthwise_dense(X, W, win, B, operators)
    if y is None:  # (not finite: the next exact form says where the NaN or infinity stays)
        form = native_form(X, W, win, X.shape[1], dense=False)
        y = None if form is None else form(X, W, B, win, None)
    return y


def _depthwise_taps(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window, _ops: Any) -> np.ndarray:
    return depthwise_conv2d(X, W, win, B)


def _conv_taps(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window, _ops: Any) -> np.ndarray:
    return conv_taps.conv_taps(X, W, B, win)


def _pointwise(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window, _ops: Any) -> np.ndarray:
    return _batch_first_product(X.reshape(X.shape[0], X.shape[1], -1), W, B, win)


def _per_sample_columns(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window,
                        _ops: Any) -> np.ndarray:
    # a per-sample im2col from the (N, C, ...) layout: the products come out batch-first
    cols = window_view(pad_spatial(X, win), win).reshape(X.shape[0], -1, math.prod(win.out_shape))  # (N, C*K, L)
    return _batch_first_product(cols, W, B, win)


def _batch_first_product(cols: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window) -> np.ndarray:
    m = W.shape[0]
    y = np.matmul(W.reshape(m, -1).astype(cols.dtype, copy=False), cols)  # (N, M, L)
    if B is not None:
        y += B.reshape(m, 1)
    return y.reshape((cols.shape[0], m) + win.out_shape)


def _single_position(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window, _ops: Any) -> np.ndarray:
    """A 1x1 conv of a one-position input (squeeze-excite's, X ``(N, C, 1, ...)``) as ``(N, C) @ (C, M)``."""
    n, c, m = X.shape[0], X.shape[1], W.shape[0]
    y = np.matmul(X.reshape(n, c), W.reshape(m, c).T.astype(X.dtype, copy=False))
    if B is not None:
        y += B.astype(X.dtype, copy=False)
    return y.reshape((n, m) + win.out_shape)


def _pointwise_folded(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window, _ops: Any) -> np.ndarray:
    """A 1x1 conv over few positions per sample as one product, the batch in the columns."""
    n, c, m = X.shape[0], X.shape[1], W.shape[0]
    w = W.reshape(m, c).astype(X.dtype, copy=False)
    cols = X.reshape(n, c, -1).transpose(1, 0, 2).reshape(c, -1)  # (C, N*L)
    y = np.matmul(w, cols).reshape(m, n, -1)
    out = np.empty((n, m, y.shape[2]), dtype=X.dtype)
    if B is None:
        out.transpose(1, 0, 2)[...] = y
    else:
        np.add(y, B.reshape(m, 1, 1).astype(X.dtype, copy=False), out=out.transpose(1, 0, 2))
    return out.reshape((n, m) + win.out_shape)


def conv_window(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], group: int,
                kernel_shape: Optional[Sequence[int]], strides: Optional[Sequence[int]],
                dilations: Optional[Sequence[int]], pads: Optional[Sequence[int]], auto_pad: str) -> Window:
    """Conv's inputs and attributes checked (InputError naming what is wrong), and its window."""
    if X.ndim < 3 or W.ndim != X.ndim:
        raise InputError("Conv: X %s and W %s must both be (N, C, d1, ...) / (M, C/group, k1, ...) "
                         "of the same rank >= 3" % (X.shape, W.shape))
    c = X.shape[1]
    m, cg = W.shape[0], W.shape[1]
    if group < 1 or c % group or m % group or cg * group != c:
        raise InputError("Conv: X has %d channels and W %s; with group=%d W.shape[1] must be "
                         "C/group and M=%d divisible by group" % (c, W.shape, group, m))
    ks = list(W.shape[2:]) if not kernel_shape else list(kernel_shape)
    if tuple(ks) != tuple(W.shape[2:]):
        raise InputError("Conv: kernel_shape %s does not match W's spatial shape %s" % (ks, W.shape[2:]))
    if B is not None and B.shape != (m,):
        raise InputError("Conv: bias B must have shape (%d,), got %s" % (m, B.shape))
    return _geometry(X.shape, tuple(ks), _ints(strides), _ints(dilations), _ints(pads), auto_pad)


def _ints(v: Optional[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    return None if v is None else tuple(int(x) for x in v)


@functools.lru_cache(maxsize=1024)
def _geometry(x_shape: Tuple[int, ...], ks: Tuple[int, ...], strides, dilations, pads, auto_pad) -> Window:
    # a model's Conv nodes see the same few shapes on every call: the window is resolved once
    # (Window is never mutated; errors are raised, not cached)
    return geometry("Conv", x_shape, ks, strides, dilations, pads, auto_pad)


def convolve(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], win: Window, group: int,
             operators: Optional[np.ndarray] = None, form: Any = True) -> np.ndarray:
    """Y = Conv(X, W, B) over the checked window ``win`` (:func:`conv_window`), as a new array.
    ``operators``: W's dense depthwise operators for ``win`` when its form takes them (kept by
    the caller for constant weights: :func:`conv_plan`), else None (built here when needed);
    ``form``: :func:`native_form`'s answer for these shapes when the caller kept it (:func:`conv_plan`),
    True to resolve it here."""
    n, m = X.shape[0], W.shape[0]
    if form is True:
        form = native_form(X, W, win, group) if _native_products() else None
    y = form(X, W, B, win, operators) if form is not None else None
    if y is not None:
        return y
    # The batch folded into the columns: one (M/G, C/G*K) @ (C/G*K, N*L) product per group,
    # large enough for a fast GEMM (and the browser's wasm kernel) instead of N small ones.
    cols = conv_columns(X, win, group)  # (G, C/G*K, L*N)
    y = linalg.matmul(W.reshape(group, m // group, -1), cols)  # (G, M/G, L*N)
    y = batch_first(np.asarray(y, dtype=X.dtype).reshape((m,) + win.out_shape + (n,)))
    if B is not None:
        y += B.reshape((m,) + (1,) * win.rank)
    return y


#: a node's plans kept per input shape (:func:`conv_plan`): a model fed ever new shapes keeps the latest few
_KEPT_SHAPES = 8


def conv_plan(kept: Optional[dict], X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], group: int,
              kernel_shape: Any, strides: Any, dilations: Any, pads: Any, auto_pad: str) -> tuple:
    """(window, native form, dense depthwise operators or None) of this Conv, its inputs checked
    (:func:`conv_window`). ``kept``: a dict that lives exactly as long as W and B are the same constant
    arrays (``OpContext.constant_memo``), where the plan is kept per input shape and dtype, so a node's
    later calls skip the checks, the geometry and the choice of form; None resolves it afresh."""
    attrs = (group, kernel_shape, strides, dilations, pads, auto_pad, _native_products())
    key = (X.shape, X.dtype)
    got = kept.get(key) if kept is not None else None
    if got is not None and got[0] == attrs:
        return got[1]
    win = conv_window(X, W, B, group, kernel_shape, strides, dilations, pads, auto_pad)
    form = native_form(X, W, win, group) if attrs[-1] else None
    plan = (win, form, dense_operators(W, win, X.dtype) if form is _dense_depthwise and kept is not None else None)
    if kept is not None:
        if len(kept) >= _KEPT_SHAPES:
            kept.clear()
        kept[key] = (attrs, plan)
    return plan


@kernel("Conv")
def conv(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    kept = ctx.constant_memo((W, B), dict) if _native_products() else None
    win, form, operators = conv_plan(kept, X, W, B, int(group), kernel_shape, strides, dilations, pads, auto_pad)
    return (convolve(X, W, B, win, int(group), operators, form),)
