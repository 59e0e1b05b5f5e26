"""ConvTranspose (1-D, 2-D and N-D; strides, pads, auto_pad, dilations, groups, output_padding,
output_shape) as the adjoint of Conv's column product.

Conv is ``Y = W @ cols(X)`` per group. ConvTranspose with weight W of shape ``(C, M/group, k...)``
is the transpose of the Conv that maps M channels to C channels with that same W: each input
element scatters ``W[c, m, taps] * X[n, c, i]`` onto the output at ``i*stride + tap*dilation``.
So ``cols = W^T @ X`` per group and the output is col2im(cols), computed over the "full" extent
``F = stride*(in-1) + dilation*(k-1) + 1`` and then cropped by ``pads`` (and extended with zeros
by ``output_padding`` / a larger ``output_shape``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops import linalg
from pytrain.ops.registry import kernel
from pytrain.ops.windows import (AUTO_PADS, Window, batch_last, conv_columns_adjoint, geometry, spatial_ints,
                                 tap_slices)


class TransposeGeometry:
    """Resolved ConvTranspose geometry: the Conv window over the full extent (whose output shape is
    X's spatial shape), the output's spatial shape, and the offset of the output inside the full
    extent (``pads_begin``; negative when ``output_shape`` asks for more than the full extent)."""

    __slots__ = ("win", "full_shape", "out_shape", "pads_begin", "group", "m")

    def __init__(self, win: Window, full_shape: Tuple[int, ...], out_shape: Tuple[int, ...],
                 pads_begin: Tuple[int, ...], group: int, m: int) -> None:
        self.win = win
        self.full_shape = full_shape
        self.out_shape = out_shape
        self.pads_begin = pads_begin
        self.group = group
        self.m = m


def transpose_geometry(op: str, x_shape: Sequence[int], w_shape: Sequence[int], auto_pad: str = "NOTSET",
                       dilations: Optional[Sequence[int]] = None, group: int = 1,
                       kernel_shape: Optional[Sequence[int]] = None,
                       output_padding: Optional[Sequence[int]] = None,
                       output_shape: Optional[Sequence[int]] = None, pads: Optional[Sequence[int]] = None,
                       strides: Optional[Sequence[int]] = None) -> TransposeGeometry:
    """Resolve ConvTranspose's attributes as the ONNX spec says, for X ``(N, C, d...)`` and W
    ``(C, M/group, k...)``: without ``output_shape`` the output is
    ``stride*(in-1) + output_padding + dilation*(k-1) + 1 - pad_begin - pad_end`` (SAME_*: ``in*stride``);
    with it (or SAME_*) the total padding is what that shape leaves over, split evenly with the odd
    element at the end for SAME_UPPER and at the beginning otherwise; explicit ``pads`` are then ignored."""
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in AUTO_PADS:
        raise GraphError("%s: auto_pad %r is not one of %s" % (op, auto_pad, ", ".join(AUTO_PADS)))
    if len(x_shape) < 3 or len(w_shape) != len(x_shape):
        raise InputError("%s: X %s and W %s must be (N, C, d1, ...) and (C, M/group, k1, ...) of the same "
                         "rank >= 3" % (op, tuple(x_shape), tuple(w_shape)))
    c, g = int(x_shape[1]), int(group)
    if g < 1 or c % g or int(w_shape[0]) != c:
        raise InputError("%s: X has %d channels and W shape %s; W.shape[0] must be C and C divisible by "
                         "group=%d" % (op, c, tuple(w_shape), g))
    in_shape = tuple(int(v) for v in x_shape[2:])
    rank = len(in_shape)
    ks = tuple(int(v) for v in w_shape[2:])
    if kernel_shape is not None and len(kernel_shape) and tuple(int(v) for v in kernel_shape) != ks:
        raise InputError("%s: kernel_shape %s does not match W's spatial shape %s" % (op, list(kernel_shape), ks))
    st = spatial_ints(op, "strides", strides, rank, 1)
    dil = spatial_ints(op, "dilations", dilations, rank, 1)
    if any(s < 1 for s in st) or any(d < 1 for d in dil):
        raise GraphError("%s: strides %s and dilations %s must be positive" % (op, list(st), list(dil)))
    opad = spatial_ints(op, "output_padding", output_padding, rank, 0)
    if any(p < 0 for p in opad):
        raise GraphError("%s: output_padding %s must be non-negative" % (op, list(opad)))
    full = tuple(s * (i - 1) + d * (k - 1) + 1 for i, s, d, k in zip(in_shape, st, dil, ks))

    if output_shape is not None and len(output_shape):
        target = tuple(int(v) for v in output_shape)
        if len(target) == rank + 2:  # some exporters give the whole (N, C, ...) shape
            target = target[2:]
        if len(target) != rank:
            raise GraphError("%s: output_shape %s must have one value per spatial axis (%d)"
                             % (op, list(output_shape), rank))
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = tuple(i * s for i, s in zip(in_shape, st))
    else:
        target = None

    if target is not None:
        pb_l: List[int] = []
        for f, p, o in zip(full, opad, target):
            total = f + p - o
            pb_l.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        pb, out = tuple(pb_l), target
    elif auto_pad == "VALID":
        pb = (0,) * rank
        out = tuple(f + p for f, p in zip(full, opad))
    else:
        pd = spatial_ints(op, "pads", pads, 2 * rank, 0)
        if any(v < 0 for v in pd):
            raise GraphError("%s: pads %s must be non-negative" % (op, list(pd)))
        pb = pd[:rank]
        out = tuple(f + p - b - e for f, p, b, e in zip(full, opad, pb, pd[rank:]))
    if any(o < 1 for o in out):
        raise InputError("%s: the output spatial shape %s is empty (input %s, kernel %s, pads/output_shape "
                         "too large)" % (op, out, in_shape, ks))
    # The Conv whose adjoint this is: over the full extent, no padding, one output per input position.
    win = geometry(op, (1, 1) + full, ks, st, dil)
    assert win.out_shape == in_shape, (win, in_shape)
    return TransposeGeometry(win, full, out, pb, g, int(w_shape[1]) * g)


def _overlap(src_len: int, dst_len: int, offset: int) -> Tuple[slice, slice]:
    """Slices (dst, src) for ``dst[j] = src[j + offset]`` where both exist."""
    lo = max(0, -offset)
    hi = min(dst_len, src_len - offset)
    if hi <= lo:
        return slice(0, 0), slice(0, 0)
    return slice(lo, hi), slice(lo + offset, hi + offset)


def shift_spatial(src: np.ndarray, shape: Sequence[int], offsets: Sequence[int]) -> np.ndarray:
    """``dst`` of spatial shape ``shape`` with ``dst[..., j] = src[..., j + offset]`` per spatial axis
    (zeros where ``src`` has no element): the full extent cropped to the output, and its adjoint
    (offsets negated) that puts an output gradient back into the full extent."""
    if tuple(src.shape[2:]) == tuple(shape) and not any(offsets):
        return src
    dst = np.zeros(tuple(src.shape[:2]) + tuple(shape), dtype=src.dtype)
    d_sl, s_sl = [slice(None)] * 2, [slice(None)] * 2
    for s_len, d_len, off in zip(src.shape[2:], shape, offsets):
        d, s = _overlap(int(s_len), int(d_len), int(off))
        d_sl.append(d)
        s_sl.append(s)
    dst[tuple(d_sl)] = src[tuple(s_sl)]
    return dst


@kernel("ConvTranspose")
def conv_transpose(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    op = "ConvTranspose node %r" % ctx.node_name
    geo = transpose_geometry(op, X.shape, W.shape, auto_pad, dilations, group, kernel_shape, output_padding,
                             output_shape, pads, strides)
    g, m = geo.group, geo.m
    if g == 1 and X.dtype.kind == "f" and not linalg.has_backend():
        full = _per_sample_full(X, W, geo)
    else:
        full = _batch_folded_full(X, W, geo)
    y = shift_spatial(full, geo.out_shape, geo.pads_begin)
    if B is not None:
        if B.shape != (m,):
            raise InputError("%s: bias B must have shape (%d,), got %s" % (op, m, B.shape))
        if y is full:
            y += B.reshape((m,) + (1,) * geo.win.rank).astype(y.dtype, copy=False)
        else:
            y = y + B.reshape((m,) + (1,) * geo.win.rank).astype(y.dtype, copy=False)
    return (np.ascontiguousarray(y, dtype=X.dtype),)


def _per_sample_full(X: np.ndarray, W: np.ndarray, geo: TransposeGeometry) -> np.ndarray:
    """Natively: ``cols[n] = W^T @ X[n]`` batch-first (one product, no batch transposes) and each
    tap's slice added onto the full extent (DBNet's 2x2 stride-2 upsampling: 4 strided copies)."""
    n, c, m = X.shape[0], X.shape[1], geo.m
    win = geo.win
    positions = int(np.prod(win.out_shape))
    cols = np.matmul(W.reshape(c, -1).T.astype(X.dtype, copy=False), X.reshape(n, c, positions))
    d = cols.reshape((n, m) + win.kernel + win.out_shape)
    non_overlapping = all(k == s for k, s in zip(win.kernel, win.strides)) and all(v == 1 for v in win.dilations)
    full = (np.empty if non_overlapping else np.zeros)((n, m) + geo.full_shape, dtype=X.dtype)
    for tap in win.taps():
        part = d[(slice(None), slice(None)) + tuple(tap)]
        if non_overlapping:  # every output element belongs to exactly one tap
            full[tap_slices(win, tap)] = part
        else:
            full[tap_slices(win, tap)] += part
    return full


def _batch_folded_full(X: np.ndarray, W: np.ndarray, geo: TransposeGeometry) -> np.ndarray:
    g, n, c, m = geo.group, X.shape[0], X.shape[1], geo.m
    # cols = W^T @ X per group, the batch folded into the columns as conv_columns lays them out.
    x = batch_last(X).reshape(g, c // g, -1)  # (G, C/G, L*N)
    cols = linalg.matmul(np.swapaxes(W.reshape(g, c // g, -1), 1, 2), x)  # (G, M/G*K, L*N)
    return conv_columns_adjoint(np.asarray(cols, dtype=X.dtype), geo.win, (n, m) + geo.full_shape)
