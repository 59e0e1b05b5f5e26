"""Sliding-window geometry shared by Conv, the pooling ops and their gradients.

Everything here works on tensors laid out ``(N, C, *spatial)`` with any number of spatial axes.
The forward kernels and the gradient kernels (``pytrain/ops/train``) must agree on padding and
output size to the element, so both compute it here:

* :func:`geometry` resolves ``kernel_shape/strides/dilations/pads/auto_pad/ceil_mode`` into a
  :class:`Window` (the padding actually applied and the output spatial shape);
* :func:`pad_spatial` pads the spatial axes as the window needs;
* :func:`tap_slices` gives, for one kernel tap, the slices of the padded input that the tap sees
  for every output position: a kernel loops over taps (a handful) instead of over elements;
* :func:`conv_columns` / :func:`conv_columns_adjoint` are Conv's im2col and col2im;
* :func:`avg_divisor` is AveragePool's per-output element count.
"""
from __future__ import annotations

import itertools
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from pytrain.errors import GraphError, InputError
from pytrain.ops import backend, linalg

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


class Window:
    """Resolved window geometry over the spatial axes of an ``(N, C, *spatial)`` input.

    ``pads_begin``/``pads_end`` are the ONNX pads after ``auto_pad`` resolution.
    ``pad_end_used`` is the end padding the windows really touch: larger than ``pads_end`` when
    ``ceil_mode`` adds a partial last window, smaller when explicit end padding is never reached.
    """

    __slots__ = ("in_shape", "kernel", "strides", "dilations", "pads_begin", "pads_end",
                 "out_shape", "pad_end_used")

    def __init__(self, in_shape: Tuple[int, ...], kernel: Tuple[int, ...], strides: Tuple[int, ...],
                 dilations: Tuple[int, ...], pads_begin: Tuple[int, ...], pads_end: Tuple[int, ...],
                 out_shape: Tuple[int, ...]) -> None:
        self.in_shape = in_shape
        self.kernel = kernel
        self.strides = strides
        self.dilations = dilations
        self.pads_begin = pads_begin
        self.pads_end = pads_end
        self.out_shape = out_shape
        self.pad_end_used = tuple(
            max(0, (o - 1) * s + (k - 1) * d + 1 - i - pb) if o > 0 else 0
            for i, k, s, d, pb, o in zip(in_shape, kernel, strides, dilations, pads_begin, out_shape))

    @property
    def rank(self) -> int:
        """Number of spatial axes."""
        return len(self.kernel)

    @property
    def padded_shape(self) -> Tuple[int, ...]:
        """Spatial shape of :func:`pad_spatial`'s result."""
        return tuple(i + pb + pe for i, pb, pe in zip(self.in_shape, self.pads_begin, self.pad_end_used))

    @property
    def needs_padding(self) -> bool:
        """Whether any window reaches outside the input."""
        return any(self.pads_begin) or any(self.pad_end_used)

    def taps(self) -> Iterator[Tuple[int, ...]]:
        """Every kernel tap (multi-index into ``kernel``), in C order (the order ONNX scans a window)."""
        return itertools.product(*[range(k) for k in self.kernel])

    def __repr__(self) -> str:
        return "Window(in=%s, kernel=%s, strides=%s, dilations=%s, pads=%s+%s, out=%s)" % (
            self.in_shape, self.kernel, self.strides, self.dilations, self.pads_begin,
            self.pads_end, self.out_shape)


def spatial_ints(op: str, name: str, value: Optional[Sequence[int]], rank: int, default: int) -> Tuple[int, ...]:
    """An attribute with one int per spatial axis (``default`` for each when absent), checked for length."""
    if value is None or len(value) == 0:
        return (default,) * rank
    out = tuple(int(v) for v in value)
    if len(out) != rank:
        raise GraphError("%s: attribute %s has %d values, expected %d (one per spatial axis)"
                         % (op, name, len(out), rank))
    return out


def geometry(op: str, x_shape: Sequence[int], kernel_shape: Sequence[int],
             strides: Optional[Sequence[int]] = None, dilations: Optional[Sequence[int]] = None,
             pads: Optional[Sequence[int]] = None, auto_pad: str = "NOTSET",
             ceil_mode: int = 0) -> Window:
    """Resolve ONNX window attributes for an input of shape ``x_shape`` = ``(N, C, *spatial)``.

    Follows the ONNX Conv/pooling spec: ``pads`` is ``[begin_1..begin_k, end_1..end_k]``;
    ``SAME_UPPER``/``SAME_LOWER`` give ``ceil(in / stride)`` outputs and put the odd pad at the
    end/beginning; ``VALID`` pads nothing. With ``ceil_mode`` (pooling) the output size rounds up,
    but a last window that would start in the end padding is dropped (as onnxruntime and PyTorch do);
    ``ceil_mode`` does not change the ``SAME_*`` output size, which is always ``ceil(in / stride)``.
    ``op`` only names the op in error messages.
    """
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in AUTO_PADS:
        raise GraphError("%s: auto_pad %r is not one of %s" % (op, auto_pad, ", ".join(AUTO_PADS)))
    in_shape = tuple(int(v) for v in x_shape[2:])
    rank = len(in_shape)
    if rank == 0:
        raise InputError("%s: input of shape %s has no spatial axes; expected (N, C, d1, ...)"
                         % (op, tuple(x_shape)))
    kernel = spatial_ints(op, "kernel_shape", kernel_shape, rank, 0)
    if any(k < 1 for k in kernel):
        raise GraphError("%s: kernel_shape %s must be positive, one per spatial axis of input shape %s"
                         % (op, list(kernel), tuple(x_shape)))
    strides_ = spatial_ints(op, "strides", strides, rank, 1)
    dil = spatial_ints(op, "dilations", dilations, rank, 1)
    if any(s < 1 for s in strides_) or any(d < 1 for d in dil):
        raise GraphError("%s: strides %s and dilations %s must be positive" % (op, list(strides_), list(dil)))
    eff = tuple((k - 1) * d + 1 for k, d in zip(kernel, dil))

    if auto_pad == "NOTSET":
        p = spatial_ints(op, "pads", pads, 2 * rank, 0)
        if any(v < 0 for v in p):
            raise GraphError("%s: pads %s must be non-negative" % (op, list(p)))
        pb, pe = p[:rank], p[rank:]
    elif auto_pad == "VALID":
        pb = pe = (0,) * rank
    else:
        pb_l: List[int] = []
        pe_l: List[int] = []
        for i, s, e in zip(in_shape, strides_, eff):
            out = -(-i // s)
            total = max(0, (out - 1) * s + e - i)
            small, big = total // 2, total - total // 2
            pb_l.append(small if auto_pad == "SAME_UPPER" else big)
            pe_l.append(big if auto_pad == "SAME_UPPER" else small)
        pb, pe = tuple(pb_l), tuple(pe_l)

    out_l: List[int] = []
    for i, s, e, b, en in zip(in_shape, strides_, eff, pb, pe):
        span = i + b + en - e
        if span < 0:
            raise InputError("%s: input spatial shape %s with pads %s is smaller than the dilated "
                             "kernel %s" % (op, in_shape, list(pb) + list(pe), list(eff)))
        if ceil_mode and auto_pad in ("NOTSET", "VALID"):
            o = -(-span // s) + 1
            if (o - 1) * s >= i + b:  # last window would start inside the end padding
                o -= 1
        else:
            o = span // s + 1
        out_l.append(o)
    return Window(in_shape, kernel, strides_, dil, tuple(pb), tuple(pe), tuple(out_l))


def pad_spatial(x: np.ndarray, win: Window, value: float = 0) -> np.ndarray:
    """``x`` with its spatial axes padded by ``win.pads_begin`` / ``win.pad_end_used``, filled with
    ``value``; ``x`` itself (no copy) when no window reaches outside it. Explicit end padding that
    no window reaches is left out."""
    if not win.needs_padding:
        return x
    xp = np.empty(tuple(x.shape[:2]) + win.padded_shape, dtype=x.dtype)
    xp.fill(value)
    inner = tuple(slice(pb, pb + i) for i, pb in zip(win.in_shape, win.pads_begin))
    xp[(slice(None), slice(None)) + inner] = x
    return xp


def tap_slices(win: Window, tap: Sequence[int]) -> Tuple[slice, ...]:
    """Index (for the padded tensor, N and C included) of what kernel tap ``tap`` sees at every
    output position: ``xp[tap_slices(win, tap)]`` has shape ``(N, C, *win.out_shape)``.

    Forward ops accumulate over taps; gradients do ``dxp[tap_slices(...)] += dy_part``
    (one tap's slice never overlaps itself, so ``+=`` is safe)."""
    sl = [slice(None), slice(None)]
    for t, s, d, o in zip(tap, win.strides, win.dilations, win.out_shape):
        start = t * d
        sl.append(slice(start, start + (o - 1) * s + 1, s))
    return tuple(sl)


def batch_last(x: np.ndarray) -> np.ndarray:
    """``(N, C, *spatial)`` -> C-contiguous ``(C, *spatial, N)``."""
    n = x.shape[0]
    return linalg.transposed(x.reshape(n, -1)).reshape(x.shape[1:] + (n,))


def batch_first(y: np.ndarray) -> np.ndarray:
    """``(C, *spatial, N)`` -> C-contiguous ``(N, C, *spatial)``."""
    n = y.shape[-1]
    return linalg.transposed(y.reshape(-1, n)).reshape((n,) + y.shape[:-1])


#: up to this many elements, padding and moving the batch last is one strided copy into a
#: zeroed buffer; for larger tensors two contiguous passes are faster (measured natively)
_ONE_COPY_MAX = 1 << 18


def padded_batch_last(x: np.ndarray, win: Window) -> np.ndarray:
    """``batch_last(pad_spatial(x, win))``: the padded input as C-contiguous ``(C, *padded, N)``."""
    if (win.needs_padding and x.size <= _ONE_COPY_MAX and backend.get("transpose") is None
            and not linalg.IN_BROWSER):  # (measured natively; in the browser a wasm kernel may transpose)
        xt = np.zeros((x.shape[1],) + win.padded_shape + (x.shape[0],), dtype=x.dtype)
        inner = tuple(slice(pb, pb + i) for i, pb in zip(win.in_shape, win.pads_begin))
        xt[(slice(None),) + inner] = np.moveaxis(x, 0, -1)
        return xt
    return batch_last(pad_spatial(x, win))


def conv_columns(x: np.ndarray, win: Window, group: int) -> np.ndarray:
    """The im2col matrix with the batch folded into the columns, shape ``(G, C/G*K, L*N)``:
    row ``c*K + tap`` (taps in C order), column ``l*N + n`` holds what tap ``tap`` of channel ``c``
    sees at output position ``l`` of sample ``n``. Conv is then one product per group, and its
    weight gradient too.

    The batch is the innermost axis so that, for unit strides, a tap's copy (and col2im's add)
    runs over whole output rows of all samples at once instead of one short row at a time."""
    xt = padded_batch_last(x, win)  # (C, *padded, N)
    columns = backend.get("columns")  # the browser's wasm im2col
    cols = columns(xt, win) if columns is not None else None
    if cols is None:
        st = xt.strides
        rank = win.rank
        view = as_strided(
            xt, shape=(xt.shape[0],) + win.kernel + win.out_shape + (xt.shape[-1],),
            strides=(st[0],) + tuple(s * d for s, d in zip(st[1:1 + rank], win.dilations))
            + tuple(s * k for s, k in zip(st[1:1 + rank], win.strides)) + (st[-1],),
            writeable=False)  # (C, *kernel, *out, N)
        cols = view
    return cols.reshape(group, -1, int(np.prod(win.out_shape)) * x.shape[0])


def conv_columns_adjoint(dcols: np.ndarray, win: Window, x_shape: Sequence[int]) -> np.ndarray:
    """The adjoint of :func:`conv_columns` (col2im): add a ``(C*K, L*N)`` column matrix back onto
    an input of shape ``x_shape`` (N, C, *spatial); overlapping windows accumulate."""
    n, c = int(x_shape[0]), int(x_shape[1])
    cols2d = np.ascontiguousarray(dcols.reshape(c * int(np.prod(win.kernel)), -1))
    adjoint = backend.get("columns_adjoint")  # the browser's wasm col2im
    acc = adjoint(cols2d, win) if adjoint is not None else None
    if acc is None:
        d = cols2d.reshape((c,) + win.kernel + win.out_shape + (n,))
        acc = np.zeros((c,) + win.padded_shape + (n,), dtype=dcols.dtype)
        for tap in win.taps():
            # one tap's window positions never overlap each other, so += is safe
            acc[tap_slices(win, tap)[1:] + (slice(None),)] += d[(slice(None),) + tuple(tap)]
    inner = tuple(slice(pb, pb + i) for i, pb in zip(win.in_shape, win.pads_begin))
    return batch_first(acc[(slice(None),) + inner])


def window_view(xp: np.ndarray, win: Window) -> np.ndarray:
    """Read-only view ``(N, C, *kernel, *out_shape)`` of the padded input ``xp`` (:func:`pad_spatial`):
    element ``[n, c, *tap, *pos]`` is what kernel tap ``tap`` sees at output position ``pos``."""
    st = xp.strides
    rank = win.rank
    return as_strided(
        xp, shape=tuple(xp.shape[:2]) + win.kernel + win.out_shape,
        strides=st[:2] + tuple(s * d for s, d in zip(st[2:2 + rank], win.dilations))
        + tuple(s * k for s, k in zip(st[2:2 + rank], win.strides)), writeable=False)


#: depthwise_conv2d works through the channels in chunks of about this many elements of tap columns:
#: its buffers then stay in cache and are reused, where whole-batch temporaries (several MB for
#: MobileNet's first blocks) cost fresh pages on every call
_DEPTHWISE_CHUNK = 1 << 19


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, win: Window, bias: Optional[np.ndarray] = None) -> np.ndarray:
    """A 2-D depthwise convolution (one ``(kh, kw)`` filter per channel: ``w`` is ``(C, 1, kh, kw)``,
    group == C), as one ``(1, K) @ (K, L)`` product per channel over its taps' shifted copies of the
    input, with no per-sample im2col and no batch transposes of the result. Output ``(N, C, *out_shape)``.

    The trick that makes every tap one contiguous copy: with stride ``s`` the padded input splits
    into ``s*s`` phases (padded rows = a mod s, columns = b mod s), each copied once, channel-major,
    into a zero-bordered ``(gh, gw)`` grid per (channel, sample). Tap ``(i, j)`` of output ``(r, c)``
    reads phase ``(i*d % s, j*d % s)`` at grid position ``(r + i*d // s, c + j*d // s)``: on the
    flattened phase that is the same position shifted by ``(i*d // s) * gw + j*d // s``. So the
    output is computed on the whole grid (positions outside ``out_shape`` read across into the next
    row or sample, or the zero tail, and are dropped), each tap's column is one slice of the flat
    phase, and each channel's K columns meet its K weights in one BLAS product (measured natively
    on MobileNetV3's 3x3 and 5x5 layers over 6x24 to 24x96 maps: 1.4-1.6x faster than a numpy
    multiply-add per tap). Each output is its own dot product over the taps that read it, so a NaN
    or infinity stays in the windows that read it. ``bias`` (C,), if given, is added as the output
    is copied out of its grid."""
    n, c = x.shape[0], x.shape[1]
    (sh, sw), (dh, dw), (kh, kw) = win.strides, win.dilations, win.kernel
    (pt, pl), (h, wd) = win.pads_begin, win.in_shape
    hp, wp = win.padded_shape
    gh, gw = -(-hp // sh), -(-wp // sw)
    ho, wo = win.out_shape
    k, span = kh * kw, n * gh * gw  # taps, one channel's grid positions over the batch
    chunk = max(1, min(c, _DEPTHWISE_CHUNK // (k * span)))
    taps = [(i * dh % sh, j * dw % sw, (i * dh // sh) * gw + j * dw // sw) for i in range(kh) for j in range(kw)]
    tail = max(off for _, _, off in taps)
    # one zeroed buffer per phase, reused for every chunk: only the input's positions are rewritten,
    # so the padding (and each channel's tail) stays zero
    phases = {}
    for a, b, _ in taps:
        if (a, b) not in phases:
            r0, c0 = (a - pt) % sh, (b - pl) % sw  # the first input row/column on this phase
            g0, g1 = (r0 + pt - a) // sh, (c0 + pl - b) // sw  # ... and where it lands on the grid
            rows, cols = len(range(r0, h, sh)), len(range(c0, wd, sw))
            phases[(a, b)] = (np.zeros((chunk, span + tail), dtype=x.dtype), (r0, c0), (g0, g1), (rows, cols))
    wk = w.reshape(c, 1, k).astype(x.dtype, copy=False)
    columns = np.empty((chunk, k, span), dtype=x.dtype)
    out = np.empty((n, c, ho, wo), dtype=x.dtype)
    for s in range(0, c, chunk):
        e = min(c, s + chunk)
        for buf, (r0, c0), (g0, g1), (rows, cols) in phases.values():
            grid = buf[:e - s, :span].reshape(e - s, n, gh, gw)
            grid[:, :, g0:g0 + rows, g1:g1 + cols] = x[:, s:e, r0::sh, c0::sw].transpose(1, 0, 2, 3)
        part = columns[:e - s]
        for t, (a, b, off) in enumerate(taps):
            part[:, t] = phases[(a, b)][0][:e - s, off:off + span]
        y = np.matmul(wk[s:e], part)  # (chunk, 1, N * gh * gw)
        crop = y.reshape(e - s, n, gh, gw)[:, :, :ho, :wo].transpose(1, 0, 2, 3)
        if bias is None:
            out[:, s:e] = crop
        else:
            np.add(crop, bias[s:e].reshape(e - s, 1, 1).astype(x.dtype, copy=False), out=out[:, s:e])
    return out


def avg_divisor(win: Window, count_include_pad: int) -> np.ndarray:
    """AveragePool's divisor for each output position, shape ``win.out_shape`` (float64).

    Counts the window taps that land on the input (``count_include_pad=0``) or on the input plus
    its explicit pads (``count_include_pad=1``; the extra area a ``ceil_mode`` window reaches past
    the end pads never counts), as onnxruntime does."""
    div = np.ones((), dtype=np.float64)
    for axis, (i, k, s, d, pb, pe, o) in enumerate(zip(
            win.in_shape, win.kernel, win.strides, win.dilations, win.pads_begin, win.pads_end,
            win.out_shape)):
        lo, hi = (-pb, i + pe) if count_include_pad else (0, i)
        pos = np.arange(o)[:, None] * s - pb + np.arange(k)[None, :] * d
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(np.float64)
        shape = [1] * win.rank
        shape[axis] = o
        div = div * cnt.reshape(shape)
    return np.broadcast_to(div, win.out_shape)
