"""Layer 3, ops: the WebGPU kernels of an embedding model's step (shaders in web/gpu/webgpu.js): Gather of rows
and its gradient, LayerNormalization over the last axis and its gradient, ReduceMean over adjacent axes and the
gradient of ReduceSum/ReduceMean. Each declines (returns None: the CPU kernel runs, see
:mod:`pytrain.ops.webgpu.kernels`) what its shader does not take; each sums in a fixed order."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.ops.nn.op_softmax import softmax_axis
from pytrain.ops.registry import OpContext
from pytrain.ops.train._shapes import reduce_axes
from pytrain.ops.webgpu import GpuTensor, device, on_gpu

_F32 = np.dtype(np.float32)


def _host_rows(indices: Any, rows: int) -> Optional[np.ndarray]:
    """The host copy of Gather's integer indices into ``rows`` rows; None without one, or out of range (the CPU
    kernel then names the error)."""
    host = indices.host if isinstance(indices, GpuTensor) else np.asarray(indices)
    if host is None or np.dtype(host.dtype).kind not in "iu":
        return None
    if host.size and (host.min() < -rows or host.max() >= rows):
        return None
    return host


def row_indices(indices: Any, rows: int) -> Optional[GpuTensor]:
    """Gather's indices into ``rows`` rows on the GPU, flat, checked and made non-negative on their host copy
    (kept); None without one, or out of range (the CPU kernel then names the error)."""
    host = _host_rows(indices, rows)
    if host is None:
        return None
    if isinstance(indices, GpuTensor) and not (host.size and host.min() < 0):
        return indices
    dev = device()
    # (read-only indices, a constant's: GPT-2's positions, uploaded once)
    return dev.constant(host, "rows%d" % rows, lambda: dev.upload(np.where(host < 0, host + rows, host).reshape(-1)
                                                                  .astype(np.int64), keep_host=True))


def _row_list(host: np.ndarray, rows: int) -> np.ndarray:
    """``rows + 1`` offsets, then the positions of the flat indices in index order grouped by row: row r's
    positions are ``list[rows + 1 + list[r]:rows + 1 + list[r + 1]]``."""
    flat = host.reshape(-1).astype(np.int64)
    flat = np.where(flat < 0, flat + rows, flat).astype(np.intp)   # (bincount takes intp: int32 in Pyodide)
    offsets = np.zeros(rows + 1, np.intp)
    np.cumsum(np.bincount(flat, minlength=rows), out=offsets[1:])
    return np.concatenate([offsets, np.argsort(flat, kind="stable")]).astype(np.int32)


def row_list(indices: Any, rows: int) -> Optional[GpuTensor]:
    """GatherGrad's indices into ``rows`` rows as a row list on the GPU (:func:`_row_list`, built on their host
    copy, once for a constant's): each row's gradient then sums only its own positions, in index order (the same
    additions as scanning every index). None as :func:`row_indices`."""
    host = _host_rows(indices, rows)
    if host is None:
        return None
    dev = device()
    return dev.constant(host, "rowlist%d" % rows, lambda: dev.upload(_row_list(host, rows)))


def gather(ctx: OpContext, data: Any, indices: Any, *, axis: int = 0) -> Optional[Tuple[GpuTensor]]:
    """Gather of rows (axis 0) of a float32 table: an embedding lookup."""
    if axis != 0 or len(data.shape) < 1 or np.dtype(data.dtype) != _F32:
        return None
    rows = int(data.shape[0])
    idx = row_indices(indices, rows)
    if idx is None:
        return None
    inner = int(np.prod(data.shape[1:], dtype=np.int64))
    dev = device()
    y = dev.empty(tuple(indices.shape) + tuple(data.shape[1:]))
    dev.dispatch("gather_rows", y.size, [on_gpu(data), idx, y], [int(np.prod(indices.shape, dtype=np.int64)), inner])
    return (y,)


def gather_grad(ctx: OpContext, dY: Any, indices: Any, X: Any, *, axis: int = 0) -> Optional[Tuple[GpuTensor]]:
    """GatherGrad of rows (axis 0): each row of dX sums, in order, the dY rows whose index is it (its row list's)."""
    if axis != 0 or len(X.shape) < 1 or np.dtype(dY.dtype) != _F32:
        return None
    rows = int(X.shape[0])
    count = int(np.prod(indices.shape, dtype=np.int64))
    inner = int(np.prod(X.shape[1:], dtype=np.int64))
    idx = row_list(indices, rows) if int(np.prod(dY.shape, dtype=np.int64)) == count * inner else None
    if idx is None:
        return None
    dev = device()
    dx = dev.empty(X.shape)
    dev.dispatch("gather_rows_grad", dx.size, [on_gpu(dY), idx, dx], [inner, dx.size, rows])
    return (dx,)


def _last_axis(x: Any, axis: int) -> Optional[Tuple[int, int]]:
    """(rows, n) when ``axis`` is the last axis of a float32 ``x``."""
    rank = len(x.shape)
    if rank < 1 or (axis + rank if axis < 0 else axis) != rank - 1 or np.dtype(x.dtype) != _F32:
        return None
    n = int(x.shape[-1])
    return int(np.prod(x.shape, dtype=np.int64)) // max(n, 1), n


def layer_normalization(ctx: OpContext, X: Any, Scale: Any, B: Any = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1) -> Optional[Tuple[Any, Any, Any]]:
    """LayerNormalization over the last axis with a Scale (and B) of that axis' size, float statistics."""
    shape = _last_axis(X, axis)
    if shape is None or stash_type != 1 or tuple(Scale.shape) != (shape[1],) or \
            (B is not None and tuple(B.shape) != (shape[1],)):
        return None
    rows, n = shape
    dev = device()
    stats = tuple(X.shape[:-1]) + (1,)
    y, mean, inv = dev.empty(X.shape), dev.empty(stats), dev.empty(stats)
    dev.dispatch("layernorm", rows, [on_gpu(X), on_gpu(Scale), None if B is None else on_gpu(B), y, mean, inv],
                 [rows, n, float(epsilon), int(B is not None)])
    return (y, mean, inv)


def layer_normalization_grad(ctx: OpContext, dY: Any, X: Any, Scale: Any, Mean: Any, InvStdDev: Any, *,
                             axis: int = -1, epsilon: float = 1e-5) -> Optional[Tuple[Any, Any, Any]]:
    """LayerNormalizationGrad over the last axis from the saved float statistics."""
    shape = _last_axis(X, axis)
    if shape is None or tuple(Scale.shape) != (shape[1],) or tuple(dY.shape) != tuple(X.shape) or \
            any(np.dtype(t.dtype) != _F32 for t in (Mean, InvStdDev)):
        return None
    rows, n = shape
    dev = device()
    gy, gx, gm, gi = on_gpu(dY), on_gpu(X), on_gpu(Mean), on_gpu(InvStdDev)
    dx = dscale = db = None
    if ctx.wants(0):
        dx = dev.empty(X.shape)
        dev.dispatch("layernorm_grad_x", rows, [gy, gx, on_gpu(Scale), gm, gi, dx], [rows, n])
    if ctx.wants(1) or ctx.wants(2):
        dscale, db = dev.empty((n,)), dev.empty((n,))
        dev.dispatch("layernorm_grad_params", n, [gy, gx, gm, gi, dscale, db], [rows, n])
    return (dx, dscale if ctx.wants(1) else None, db if ctx.wants(2) else None)


def _adjacent(shape: Sequence[int], axes: Sequence[int]) -> Optional[Tuple[int, int, int]]:
    if not axes or list(axes) != list(range(axes[0], axes[-1] + 1)):
        return None
    prod = lambda dims: int(np.prod(dims, dtype=np.int64)) if len(dims) else 1  # noqa: E731
    return prod(shape[:axes[0]]), prod(shape[axes[0]:axes[-1] + 1]), prod(shape[axes[-1] + 1:])


def reduce_mean(ctx: OpContext, data: Any, axes_in: Any = None, *, axes: Any = None, keepdims: int = 1,
                noop_with_empty_axes: int = 0) -> Optional[Tuple[GpuTensor]]:
    """ReduceMean over adjacent axes: their sum in order, times 1 / count."""
    if np.dtype(data.dtype) != _F32 or isinstance(axes_in, GpuTensor):
        return None
    red = reduce_axes(len(data.shape), axes_in, axes, noop_with_empty_axes, "ReduceMean axes")
    run = None if red is None else _adjacent(data.shape, sorted(red))
    if run is None or run[1] == 0:
        return None
    shape = [1 if i in red else d for i, d in enumerate(data.shape)] if keepdims else \
        [d for i, d in enumerate(data.shape) if i not in red]
    dev = device()
    y = dev.empty(shape)
    dev.dispatch("reduce_sum", run[0] * run[2], [on_gpu(data), y], [run[0], run[1], run[2], 1.0 / run[1]])
    return (y,)


def reduce_grad(ctx: OpContext, dY: Any, X: Any, axes_input: Any = None, *, mode: str = "sum",
                axes: Optional[Sequence[int]] = None, keepdims: int = 1,
                noop_with_empty_axes: int = 0) -> Optional[Tuple[GpuTensor]]:
    """ReduceGrad (sum or mean): dY broadcast back over X's reduced axes, times 1 / count for the mean."""
    if mode not in ("sum", "mean") or np.dtype(dY.dtype) != _F32 or isinstance(axes_input, GpuTensor):
        return None
    red = reduce_axes(len(X.shape), axes_input, axes, noop_with_empty_axes, "ReduceGrad axes")
    if red is None:
        return None
    kept: List[int] = list(dY.shape)
    if not keepdims:
        for a in sorted(red):
            kept.insert(a, 1)
    out = [int(d) for d in X.shape]
    if len(kept) != len(out) or any(k not in (1, o) for k, o in zip(kept, out)):
        return None
    count = int(np.prod([out[a] for a in red], dtype=np.int64)) if red else 1
    scale = 1.0 / max(count, 1) if mode == "mean" else 1.0
    dev = device()
    dx = dev.empty(out)
    strides, step = [0] * len(out), 1
    for a in range(len(out) - 1, -1, -1):
        strides[a] = step if kept[a] != 1 else 0
        step *= kept[a]
    size = dx.size
    # the broadcast product (binary op 2) of dY, read with its reduced axes' stride 0, and the scale
    dev.dispatch("binary", size, [on_gpu(dY), dev.constant(_scalar(scale)), dx],
                 [2, size, len(out) or 1] + (out or [1]) + (strides or [0]) + [0] * (len(out) or 1))
    return (dx,)


def softmax(ctx: OpContext, input: Any, *, axis: Optional[int] = None) -> Optional[Tuple[GpuTensor]]:
    """Softmax over the last axis (as the model's opset means the node's axis): per row exp(x - max) / sum."""
    rank = len(input.shape)
    if rank < 1 or np.dtype(input.dtype) != _F32 or softmax_axis(ctx, "Softmax", axis, rank) != rank - 1:
        return None
    n = int(input.shape[-1])
    rows = int(np.prod(input.shape, dtype=np.int64)) // max(n, 1)
    dev = device()
    y = dev.empty(input.shape)
    dev.dispatch("softmax_rows", rows, [on_gpu(input), y], [rows, n])
    return (y,)


def softmax_grad(ctx: OpContext, dY: Any, Y: Any, *, axis: int = -1) -> Optional[Tuple[GpuTensor]]:
    """SoftmaxGrad over the last axis: Y * (dY - sum(dY * Y)) per row."""
    shape = _last_axis(Y, axis)
    if shape is None or tuple(dY.shape) != tuple(Y.shape) or np.dtype(dY.dtype) != _F32:
        return None
    dev = device()
    dx = dev.empty(Y.shape)
    dev.dispatch("softmax_grad_rows", shape[0], [on_gpu(dY), on_gpu(Y), dx], list(shape))
    return (dx,)


_SCALARS: dict = {}


def _scalar(v: float) -> np.ndarray:
    """A read-only float32 scalar, the same array for the same value (uploaded once as a constant)."""
    a = _SCALARS.get(v)
    if a is None:
        a = np.full((), v, np.float32)
        a.flags.writeable = False
        _SCALARS[v] = a
    return a
