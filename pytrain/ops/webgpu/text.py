"""Layer 3, ops: the WebGPU kernels a text model's step needs besides products (shaders in web/gpu/shaders_text.js):
Neg/Exp/Tanh/Erf and Pow by 1, 2 or 3, Sum, Dropout with the CPU generator's mask and its gradient, Cast/CastLike
where the GPU holds both types, Transpose of any permutation, Unsqueeze/Squeeze as views, Concat/Split and their
gradients. Each declines (returns None: the CPU kernel runs, see :mod:`pytrain.ops.webgpu.kernels`) what its
shader does not take, so a case it cannot mean is refused by the plan naming the node."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.ops.common import norm_axis, scalar_of
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, get_kernel
from pytrain.ops.webgpu import GpuTensor, conv, device, on_gpu

_F32 = np.dtype(np.float32)
_INTS = (np.dtype(np.int32), np.dtype(np.int64))


def held(x: Any) -> Any:
    """``x`` as a GPU kernel takes it: a GPU tensor, or a plan's read-only constant (a frozen weight) uploaded
    once and kept (:meth:`Device.constant`); None for a CPU array computed in the step (its node stays there)."""
    if isinstance(x, GpuTensor):
        return x
    if isinstance(x, np.ndarray) and not x.flags.writeable and x.size > 1:
        return device().constant(x)
    return None


def _is_f32(x: Any) -> bool:
    return x is not None and np.dtype(x.dtype) == _F32


def view(x: GpuTensor, shape: Sequence[int]) -> GpuTensor:
    """``x``'s buffer under another shape of as many elements (no copy; a host copy reshaped too)."""
    return conv.reshape(OpContext(), x, np.asarray(list(shape), np.int64), allowzero=1)[0]


def _apply(x: Any, code: int) -> GpuTensor:
    dev = device()
    y = dev.empty(x.shape)
    dev.dispatch("unary_text", y.size, [on_gpu(x), y], [y.size, code])
    return y


def unary(code: int) -> Any:
    """Neg (0), Exp (1), Tanh (2), Erf (3) of a float32 GPU tensor (a CPU one stays on the CPU)."""
    def run(ctx: OpContext, X: Any) -> Optional[Tuple[GpuTensor]]:
        if not isinstance(X, GpuTensor) or not _is_f32(X):
            return None
        return (_apply(X, code),)
    return run


def pow_(ctx: OpContext, X: Any, Y: Any) -> Optional[Tuple[GpuTensor]]:
    """Pow of a float32 GPU tensor by an exponent 1, 2 or 3 on the CPU: x, x * x, (x * x) * x (the wasm
    kernel's products; numpy's powf may differ by an ulp); other exponents are not routed."""
    if not isinstance(X, GpuTensor) or not _is_f32(X) or isinstance(Y, GpuTensor) or np.size(Y) != 1 \
            or np.ndim(Y) > len(X.shape) or np.dtype(np.asarray(Y).dtype).kind not in "fiu":
        return None
    e = float(np.asarray(Y).reshape(()))
    code = {1.0: 6, 2.0: 4, 3.0: 5}.get(e)
    return None if code is None else (_apply(X, code),)


def sum_(ctx: OpContext, *data: Any) -> Optional[Tuple[Any]]:
    """Sum of float32 tensors, left to right as the numpy kernel folds them (Add's broadcasting)."""
    if not data or not all(_is_f32(x) for x in data) or not any(isinstance(x, GpuTensor) for x in data):
        return None
    add = _BASE[("", "Add")]
    y = data[0]
    for x in data[1:]:
        out = add(ctx, y, x)
        if out is None:
            return None
        y = out[0]
    return (y,)


def dropout(ctx: OpContext, data: Any, ratio: Any = None, training_mode: Any = None, *, seed: Any = None,
            **legacy: Any) -> Optional[Tuple[Any, Any]]:
    """Dropout: the identity when not training or at ratio 0; else the keep-mask drawn by the CPU generator
    exactly as the numpy kernel draws it (the same numbers), uploaded (counted), and (x * mask) * 1 / (1 - r)."""
    if legacy or ctx.opset < 12 or not _is_f32(data) or isinstance(ratio, GpuTensor) \
            or isinstance(training_mode, GpuTensor):
        return None
    r = float(scalar_of("Dropout", "ratio", ratio, 0.5))
    training = bool(scalar_of("Dropout", "training_mode", training_mode, False))
    if not 0.0 <= r < 1.0:
        return None   # (the numpy kernel names a bad ratio; r == 1 drops everything)
    if not training or r == 0.0:
        return (data, np.ones(data.shape, dtype=np.bool_) if ctx.wants(1) else None)
    keep = ctx.rng.random(data.shape, dtype=np.float32) >= np.float32(r)
    dev = device()
    mask = dev.upload(keep.astype(np.float32))
    mask.host = keep   # (a CPU DropoutGrad reads the bool mask)
    y = dev.empty(data.shape)
    dev.dispatch("dropout", y.size, [on_gpu(data), mask, y], [y.size, float(np.float32(1.0 / (1.0 - r)))])
    return (y, mask if ctx.wants(1) else None)


def dropout_grad(ctx: OpContext, dY: Any, mask: Any, ratio: Any = None) -> Optional[Tuple[Any]]:
    """DropoutGrad: dY at ratio 0; else dY * 1 / (1 - r) where the mask kept, 0 elsewhere."""
    if not _is_f32(dY) or isinstance(ratio, GpuTensor):
        return None
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if r == 0.0:
        return (dY,)
    if not 0.0 < r < 1.0 or tuple(mask.shape) != tuple(dY.shape):
        return None
    dev = device()
    m = mask if isinstance(mask, GpuTensor) else dev.upload(np.asarray(mask, np.float32))
    dx = dev.empty(dY.shape)
    dev.dispatch("dropout_grad", dx.size, [on_gpu(dY), m, dx], [dx.size, float(np.float32(1.0 / (1.0 - r)))])
    return (dx,)


def _cast(x: Any, dt: np.dtype) -> Optional[Tuple[Any]]:
    """``x`` as ``dt`` when the GPU means it exactly: the same type, or between int32 and int64 within
    int32 (as the GPU stores both); other casts are not routed."""
    if not isinstance(x, GpuTensor):
        return None
    if np.dtype(x.dtype) == dt:
        return (x,)
    if np.dtype(x.dtype) in _INTS and dt in _INTS and x.host is not None:
        v = GpuTensor(x.device, x.id, x.shape, dt)
        v.base, v.host = x, x.host.astype(dt)
        return (v,)
    return None


def cast(ctx: OpContext, input: Any, *, to: Optional[int] = None, saturate: int = 1) -> Optional[Tuple[Any]]:
    """Cast of a GPU tensor to its own type, or between int32 and int64."""
    return None if to is None else _cast(input, dtypes.to_numpy(int(to)))


def cast_like(ctx: OpContext, input: Any, target_type: Any, *, saturate: int = 1) -> Optional[Tuple[Any]]:
    """CastLike of a GPU tensor (see :func:`cast`)."""
    return _cast(input, np.dtype(target_type.dtype))


def transpose(ctx: OpContext, data: Any, *, perm: Optional[Sequence[int]] = None) -> Optional[Tuple[GpuTensor]]:
    """Transpose of a GPU tensor (or a frozen weight) by any permutation (the default reverses the axes): a copy."""
    data = held(data)
    if data is None or data.dtype != _F32:
        return None
    rank = len(data.shape)
    p = list(range(rank))[::-1] if not perm else [int(i) for i in perm]
    if sorted(p) != list(range(rank)):
        return None   # (the numpy kernel names it)
    shape = [int(data.shape[a]) for a in p]
    if p == list(range(rank)) or data.size == 0:
        return (view(data, shape),)
    strides, step = [0] * rank, 1
    for a in range(rank - 1, -1, -1):
        strides[a] = step
        step *= int(data.shape[a])
    dev = device()
    y = dev.empty(shape)
    dev.dispatch("transpose", y.size, [data, y], [y.size, rank] + shape + [strides[a] for a in p])
    return (y,)


def _shape_of(op: str, ctx: OpContext, x: GpuTensor, *rest: Any, **kw: Any) -> Tuple[int, ...]:
    """The output shape the numpy kernel of ``op`` gives ``x`` (read on a stand-in: only shapes matter)."""
    info = get_kernel(op)
    return tuple(info.numpy_fn(ctx, x.stand_in(), *rest, **kw)[0].shape)


def squeeze(op: str) -> Any:
    """Squeeze/Unsqueeze of a GPU tensor by axes on the CPU: a view."""
    def run(ctx: OpContext, data: Any, axes_in: Any = None, *, axes: Any = None) -> Optional[Tuple[GpuTensor]]:
        if not isinstance(data, GpuTensor) or isinstance(axes_in, GpuTensor):
            return None
        return (view(data, _shape_of(op, ctx, data, axes_in, axes=axes)),)
    return run


def _copy_block(src: GpuTensor, dst: GpuTensor, outer: int, n: int, rows: Tuple[int, int],
                offs: Tuple[int, int]) -> None:
    """Copy ``outer`` runs of ``n`` elements: src row ``rows[0]`` from offset ``offs[0]`` to dst's ``rows[1]``,
    ``offs[1]``."""
    if outer * n:
        device().dispatch("copy_block", outer * n, [src, dst], [outer, n, rows[0], offs[0], rows[1], offs[1]])


def _outer_inner(shape: Sequence[int], a: int) -> Tuple[int, int]:
    return int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a + 1:], dtype=np.int64))


def concat(ctx: OpContext, *inputs: Any, axis: Optional[int] = None) -> Optional[Tuple[Any]]:
    """Concat of float32 tensors (one at least on the GPU) along an axis: a slab copied per input."""
    if axis is None or not inputs or not all(_is_f32(x) for x in inputs) \
            or not any(isinstance(x, GpuTensor) for x in inputs):
        return None
    rank = len(inputs[0].shape)
    a = norm_axis("Concat", axis, rank)
    first = tuple(inputs[0].shape)
    if any(len(x.shape) != rank or any(d != e for j, (d, e) in enumerate(zip(x.shape, first)) if j != a)
           for x in inputs):
        return None   # (the numpy kernel names the mismatch)
    if len(inputs) == 1:
        return (inputs[0],)
    total = sum(int(x.shape[a]) for x in inputs)
    outer, inner = _outer_inner(first, a)
    y = device().empty(first[:a] + (total,) + first[a + 1:])
    at = 0
    for x in inputs:
        n = int(x.shape[a]) * inner
        _copy_block(on_gpu(x), y, outer, n, (n, total * inner), (0, at * inner))
        at += int(x.shape[a])
    return (y,)


def _pieces(x: GpuTensor, a: int, sizes: Sequence[int], wanted: Sequence[bool]) -> Tuple[Any, ...]:
    """``x`` cut along axis ``a`` into ``sizes`` (copies; None for a piece not wanted)."""
    outer, inner = _outer_inner(x.shape, a)
    dim = int(x.shape[a])
    outs: List[Any] = []
    at = 0
    for s, want in zip(sizes, wanted):
        piece = None
        if want:
            piece = device().empty(tuple(x.shape[:a]) + (int(s),) + tuple(x.shape[a + 1:]))
            _copy_block(x, piece, outer, int(s) * inner, (dim * inner, int(s) * inner), (at * inner, 0))
        outs.append(piece)
        at += int(s)
    return tuple(outs)


def split(ctx: OpContext, input: Any, split_in: Any = None, *, axis: int = 0, num_outputs: Optional[int] = None,
          split: Optional[Sequence[int]] = None) -> Optional[Tuple[Any, ...]]:
    """Split of a float32 GPU tensor (the sizes as the numpy kernel reads them, on a stand-in)."""
    if not isinstance(input, GpuTensor) or input.dtype != _F32 or isinstance(split_in, GpuTensor):
        return None
    shapes = get_kernel("Split").numpy_fn(ctx, input.stand_in(), split_in, axis=axis, num_outputs=num_outputs,
                                          split=split)
    a = norm_axis("Split", axis, len(input.shape))
    return _pieces(input, a, [s.shape[a] for s in shapes], [ctx.wants(i) for i in range(len(shapes))])


def concat_grad(ctx: OpContext, dY: Any, *Xs: Any, axis: int = 0) -> Optional[Tuple[Any, ...]]:
    """ConcatGrad: the pieces of dY each input filled."""
    if not isinstance(dY, GpuTensor) or dY.dtype != _F32:
        return None
    a = norm_axis("ConcatGrad", axis, len(dY.shape))
    return _pieces(dY, a, [int(x.shape[a]) for x in Xs], [ctx.wants(i) for i in range(len(Xs))])


def split_grad(ctx: OpContext, *args: Any, axis: int = 0) -> Optional[Tuple[Any]]:
    """SplitGrad with every gradient given: their Concat."""
    n = len(args) // 2
    if len(args) % 2 or n == 0 or any(g is None for g in args[n:]):
        return None
    return concat(ctx, *args[n:], axis=axis)


_BASE: Dict[Tuple[str, str], Any] = {}   # the kernels table these kernels call into (Add for Sum)


def table(base: Dict[Tuple[str, str], Any]) -> Dict[Tuple[str, str], Any]:
    """(domain, op) -> this module's GPU kernel, for :data:`pytrain.ops.webgpu.kernels.KERNELS` (``base``: that
    table, whose Add :func:`sum_` folds with)."""
    _BASE.update(base)
    return dict(_KERNELS)


_KERNELS = {("", "Neg"): unary(0), ("", "Exp"): unary(1), ("", "Tanh"): unary(2), ("", "Erf"): unary(3),
           ("", "Pow"): pow_, ("", "Sum"): sum_, ("", "Dropout"): dropout,
           (PYTRAIN_DOMAIN, "DropoutGrad"): dropout_grad,
           ("", "Cast"): cast, ("", "CastLike"): cast_like, ("", "Transpose"): transpose,
           ("", "Squeeze"): squeeze("Squeeze"), ("", "Unsqueeze"): squeeze("Unsqueeze"), ("", "Concat"): concat,
           ("", "Split"): split, (PYTRAIN_DOMAIN, "ConcatGrad"): concat_grad, (PYTRAIN_DOMAIN, "SplitGrad"): split_grad}
