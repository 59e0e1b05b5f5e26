"""Layer 3, ops: the WebGPU kernels of a text model's batched products and per-token losses (shaders in
web/gpu/webgpu.js and web/gpu/shaders_text.js): MatMul with broadcast batch axes and MatMulGrad, Gather and
GatherGrad along any axis, SoftmaxCrossEntropyLoss and its gradient over (N, C, d...) scores (run on the
class-last view). Each declines (returns None: the CPU kernel runs) what its shaders do not take."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.ops.common import norm_axis
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext
from pytrain.ops.webgpu import GpuTensor, device, nn, on_gpu
from pytrain.ops.webgpu.text import held, transpose, view

_F32 = np.dtype(np.float32)


def _prod(dims: Sequence[int]) -> int:
    return int(np.prod(dims, dtype=np.int64)) if len(dims) else 1


def _batch_strides(shape: Sequence[int], batch: Sequence[int], per: int) -> List[int]:
    """Element strides of an operand's batch axes (``per`` elements a matrix) along ``batch``, 0 where broadcast."""
    own = (1,) * (len(batch) - len(shape)) + tuple(shape)
    strides, step = [0] * len(batch), per
    for a in range(len(batch) - 1, -1, -1):
        strides[a] = step if own[a] != 1 else 0
        step *= own[a]
    return strides


def product(a: Any, b: Any, trans: Tuple[int, int] = (0, 0)) -> Optional[GpuTensor]:
    """op(a) @ op(b) (``trans``: whether each is transposed) of float32 operands of rank >= 2 with numpy's
    batch broadcasting; None for what no shader takes."""
    (m, k) = a.shape[-2:][::-1] if trans[0] else a.shape[-2:]
    (k2, n) = b.shape[-2:][::-1] if trans[1] else b.shape[-2:]
    if k != k2:
        return None
    ba, bb = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    dev = device()
    if not ba or not bb or ba == bb:
        batch = ba or bb
        count = _prod(batch)
        if count > 65535:
            return None
        y = dev.empty(batch + (m, n))
        dev.grid("matmul", (-(-n // 8), -(-m // 8), count), [on_gpu(a), on_gpu(b), None, y],
                 [m, n, k, trans[0], trans[1], 0, 1.0, m * k if ba else 0, k * n if bb else 0, m * n])
        return y
    rank = max(len(ba), len(bb))
    ba, bb = (1,) * (rank - len(ba)) + ba, (1,) * (rank - len(bb)) + bb
    if any(x != y and 1 not in (x, y) for x, y in zip(ba, bb)):
        return None   # (the numpy kernel names the mismatch)
    batch = tuple(max(x, y) for x, y in zip(ba, bb))
    if _prod(batch) > 65535:
        return None
    y = dev.empty(batch + (m, n))
    dev.grid("matmul_nd", (-(-n // 8), -(-m // 8), _prod(batch)), [on_gpu(a), on_gpu(b), y],
             [m, n, k, trans[0], trans[1], rank] + list(batch) + _batch_strides(ba, batch, m * k)
             + _batch_strides(bb, batch, k * n))
    return y


def matmul(ctx: OpContext, A: Any, B: Any) -> Optional[Tuple[GpuTensor]]:
    """MatMul of float32 operands of rank >= 2, batch axes broadcast."""
    if len(A.shape) < 2 or len(B.shape) < 2 or np.dtype(A.dtype) != _F32 or np.dtype(B.dtype) != _F32:
        return None
    y = product(A, B)
    return None if y is None else (y,)


def _sum_to(ctx: OpContext, x: GpuTensor, shape: Sequence[int]) -> Optional[GpuTensor]:
    """``x`` summed over the axes it broadcast ``shape`` along (SumToShape's shader)."""
    if tuple(x.shape) == tuple(shape):
        return x
    out = _BASE[(PYTRAIN_DOMAIN, "SumToShape")](ctx, x, np.broadcast_to(np.zeros((), np.float32), tuple(shape)))
    return None if out is None else out[0]


def matmul_grad(ctx: OpContext, dY: Any, A: Any, B: Any) -> Optional[Tuple[Any, Any]]:
    """MatMulGrad of operands of rank >= 2: dA = dY @ B^T, dB = A^T @ dY, each summed to its operand's shape
    (a 2-D operand shared by a batch: one product over the batch folded into its rows)."""
    if len(A.shape) < 2 or len(B.shape) < 2 or not all(np.dtype(t.dtype) == _F32 for t in (dY, A, B)):
        return None
    da = db = None
    if ctx.wants(0):
        if len(A.shape) == 2 and len(B.shape) > 2:
            return None   # (a batch of B sharing A: not routed)
        if len(B.shape) == 2 and len(A.shape) > 2:
            flat = product(view(on_gpu(dY), (-1, dY.shape[-1])), B, (0, 1))
            da = None if flat is None else view(flat, A.shape)
        else:
            full = product(dY, B, (0, 1))
            da = None if full is None else _sum_to(ctx, full, A.shape)
        if da is None:
            return None
    if ctx.wants(1):
        if len(B.shape) == 2 and len(A.shape) > 2:
            db = product(view(on_gpu(A), (-1, A.shape[-1])), view(on_gpu(dY), (-1, dY.shape[-1])), (1, 0))
        elif len(A.shape) == 2 and len(B.shape) > 2:
            return None
        else:
            full = product(A, dY, (1, 0))
            db = None if full is None else _sum_to(ctx, full, B.shape)
        if db is None:
            return None
    return (da, db)


def gather(ctx: OpContext, data: Any, indices: Any, *, axis: int = 0) -> Optional[Tuple[GpuTensor]]:
    """Gather along any axis of a float32 GPU tensor or frozen table (rows, axis 0: the embedding lookup's shader)."""
    data = held(data)
    if data is None or data.dtype != _F32 or len(data.shape) < 1:
        return None
    a = norm_axis("Gather", axis, len(data.shape))
    if a == 0:
        return nn.gather(ctx, data, indices, axis=0)
    rows = int(data.shape[a])
    idx = nn.row_indices(indices, rows)
    if idx is None:
        return None
    outer, inner, count = _prod(data.shape[:a]), _prod(data.shape[a + 1:]), _prod(indices.shape)
    dev = device()
    y = dev.empty(tuple(data.shape[:a]) + tuple(indices.shape) + tuple(data.shape[a + 1:]))
    dev.dispatch("gather_axis", y.size, [data, idx, y], [outer, count, inner, rows])
    return (y,)


def gather_grad(ctx: OpContext, dY: Any, indices: Any, X: Any, *, axis: int = 0) -> Optional[Tuple[GpuTensor]]:
    """GatherGrad along any axis: each element of dX sums, in order, the dY whose index is its row."""
    if len(X.shape) < 1 or np.dtype(dY.dtype) != _F32:
        return None
    a = norm_axis("GatherGrad", axis, len(X.shape))
    if a == 0:
        return nn.gather_grad(ctx, dY, indices, X, axis=0)
    rows = int(X.shape[a])
    outer, inner, count = _prod(X.shape[:a]), _prod(X.shape[a + 1:]), _prod(indices.shape)
    idx = nn.row_list(indices, rows) if _prod(dY.shape) == outer * count * inner else None
    if idx is None:
        return None
    dev = device()
    dx = dev.empty(X.shape)
    dev.dispatch("gather_axis_grad", dx.size, [on_gpu(dY), idx, dx], [outer, count, inner, rows])
    return (dx,)


def _class_last(x: GpuTensor) -> GpuTensor:
    """(N, C, d...) as the (N * d..., C) rows of its class-last transpose."""
    rank = len(x.shape)
    t = transpose(OpContext(), x, perm=[0] + list(range(2, rank)) + [1])[0]
    return view(t, (-1, int(x.shape[1])))


def _class_second(rows: GpuTensor, shape: Sequence[int]) -> GpuTensor:
    """The (N * d..., C) rows back as (N, C, d...)."""
    rank = len(shape)
    last = view(rows, (int(shape[0]),) + tuple(int(d) for d in shape[2:]) + (int(shape[1]),))
    return transpose(OpContext(), last, perm=[0, rank - 1] + list(range(1, rank - 1)))[0]


def softmax_cross_entropy(ctx: OpContext, scores: Any, labels: Any, weights: Any = None, *,
                          ignore_index: Optional[int] = None, reduction: str = "mean") -> Optional[Tuple[Any, Any]]:
    """SoftmaxCrossEntropyLoss of (N, C, d...) scores: the (N, C) shader on the class-last rows, log_prob
    transposed back (2-D scores: the shader as it is)."""
    rows_loss = _BASE[("", "SoftmaxCrossEntropyLoss")]
    if len(scores.shape) < 3 or not isinstance(scores, GpuTensor) or not isinstance(labels, GpuTensor):
        return rows_loss(ctx, scores, labels, weights, ignore_index=ignore_index, reduction=reduction)
    if weights is not None or scores.dtype != _F32 or tuple(labels.shape) != (scores.shape[0],) + scores.shape[2:]:
        return None
    out = rows_loss(ctx, _class_last(scores), view(labels, (-1,)), ignore_index=ignore_index, reduction=reduction)
    if out is None:
        return None
    return (out[0], _class_second(out[1], scores.shape) if ctx.wants(1) else None)


def softmax_cross_entropy_grad(ctx: OpContext, dLoss: Any, log_prob: Any, labels: Any, weights: Any = None, *,
                               reduction: str = "mean", ignore_index: Optional[int] = None) -> Optional[Tuple[Any]]:
    """SoftmaxCrossEntropyLossGrad over (N, C, d...): the (N, C) shader on the class-last rows, transposed back."""
    rows_grad = _BASE[(PYTRAIN_DOMAIN, "SoftmaxCrossEntropyLossGrad")]
    if len(log_prob.shape) < 3 or not isinstance(log_prob, GpuTensor) or not isinstance(labels, GpuTensor):
        return rows_grad(ctx, dLoss, log_prob, labels, weights, reduction=reduction, ignore_index=ignore_index)
    if weights is not None or log_prob.dtype != _F32:
        return None
    out = rows_grad(ctx, dLoss, _class_last(log_prob), view(labels, (-1,)), reduction=reduction,
                    ignore_index=ignore_index)
    return None if out is None else (_class_second(out[0], log_prob.shape),)


_BASE: Dict[Tuple[str, str], Any] = {}   # the kernels table these call into: SumToShape, the (N, C) losses


def table(base: Dict[Tuple[str, str], Any]) -> Dict[Tuple[str, str], Any]:
    """(domain, op) -> this module's GPU kernel, for :data:`pytrain.ops.webgpu.kernels.KERNELS` (``base``: that
    table as it was, whose SumToShape and (N, C) loss kernels these call)."""
    _BASE.update(base)
    return dict(_KERNELS)


_KERNELS = {("", "MatMul"): matmul, (PYTRAIN_DOMAIN, "MatMulGrad"): matmul_grad, ("", "Gather"): gather,
           (PYTRAIN_DOMAIN, "GatherGrad"): gather_grad, ("", "SoftmaxCrossEntropyLoss"): softmax_cross_entropy,
           (PYTRAIN_DOMAIN, "SoftmaxCrossEntropyLossGrad"): softmax_cross_entropy_grad}
