"""Layer 3, ops: the plan kernels of the WebGPU device (shaders in web/gpu/webgpu.js), by (domain, op), and
:func:`choose`, the kernel chooser a plan is built with to run on the GPU.

Each kernel has the numpy kernel's signature, takes :class:`GpuTensor` (or CPU arrays, uploaded and
counted) and returns GpuTensors; it returns None for a case its shader does not take, which then runs
on the CPU kernel (see the package docstring for what a CPU node may read).
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, KernelInfo, OpContext
from pytrain.ops.webgpu import GpuTensor, GpuTransferError, conv, device, mobile, nn, on_gpu
from pytrain.ops.webgpu import batched, bn_train, gelu, text

_F32 = np.dtype(np.float32)
Kernel = Callable[..., Optional[Tuple[Any, ...]]]


def _floats(*xs: Any) -> bool:
    return all(x is not None and np.dtype(x.dtype) == _F32 for x in xs)


def gemm(ctx: OpContext, A: Any, B: Any, C: Any = None, *, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0) -> Optional[Tuple[GpuTensor]]:
    """ONNX Gemm of 2-D float32 operands with a bias of n, (1, n), (m, n) or one value (beta 1)."""
    if len(A.shape) != 2 or len(B.shape) != 2 or not _floats(A, B):
        return None
    m, k = (A.shape[1], A.shape[0]) if transA else A.shape
    k2, n = (B.shape[1], B.shape[0]) if transB else B.shape
    if k != k2:
        return None  # the numpy kernel names the mismatch
    kind = 0
    if C is not None and beta != 0.0:
        shape = tuple(C.shape)
        if beta != 1.0 or not _floats(C):
            return None
        kind = 1 if shape in ((n,), (1, n)) else 2 if shape == (m, n) else 3 if int(np.prod(shape)) == 1 else 0
        if kind == 0:
            return None
    dev = device()
    y = dev.empty((m, n))
    bias = on_gpu(C) if kind else None
    dev.grid("matmul", (-(-n // 8), -(-m // 8), 1), [on_gpu(A), on_gpu(B), bias, y],
             [m, n, k, int(bool(transA)), int(bool(transB)), kind, float(alpha), 0, 0, 0])
    return (y,)


def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """numpy's broadcast of two shapes, or None when they do not broadcast (numpy 1.17 has no broadcast_shapes)."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def _strides(shape: Sequence[int], out: Sequence[int]) -> List[int]:
    """Element strides of a C-contiguous ``shape`` read along ``out``'s axes (0 where broadcast)."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, step = [0] * len(out), 1
    for axis in range(len(out) - 1, -1, -1):
        strides[axis] = step if shape[axis] != 1 else 0
        step *= shape[axis]
    return strides


def _binary(op: int) -> Kernel:
    """Add/Sub/Mul/Div (op 0-3) of float32 tensors with numpy's broadcasting."""
    def run(ctx: OpContext, A: Any, B: Any) -> Optional[Tuple[GpuTensor]]:
        if not _floats(A, B) or not (isinstance(A, GpuTensor) or isinstance(B, GpuTensor)):
            return None   # (both on the CPU, a constant's arithmetic: the CPU computes it, a later Pow reads it)
        shape = broadcast_shape(A.shape, B.shape)
        if shape is None:
            return None
        dev = device()
        y = dev.empty(shape)
        size = int(np.prod(shape, dtype=np.int64))
        dims = list(shape) or [1]
        params = [op, size, len(dims)] + dims + (_strides(A.shape, shape) or [0]) + (_strides(B.shape, shape) or [0])
        dev.dispatch("binary", size, [on_gpu(A), on_gpu(B), y], params)
        return (y,)
    return run


def relu(ctx: OpContext, X: Any) -> Optional[Tuple[GpuTensor]]:
    if not _floats(X):
        return None
    dev = device()
    y = dev.empty(X.shape)
    dev.dispatch("relu", y.size, [on_gpu(X), y], [y.size])
    return (y,)


def relu_grad(ctx: OpContext, dY: Any, Y: Any) -> Optional[Tuple[GpuTensor]]:
    if not _floats(dY, Y) or tuple(dY.shape) != tuple(Y.shape):
        return None
    dev = device()
    dx = dev.empty(dY.shape)
    dev.dispatch("relu_grad", dx.size, [on_gpu(dY), on_gpu(Y), dx], [dx.size])
    return (dx,)


def _reduce(x: Any, outer: int, red: int, inner: int, shape: Sequence[int]) -> GpuTensor:
    """``x`` viewed as (outer, red, inner) summed over its middle axis in order, as a tensor of ``shape``."""
    dev = device()
    y = dev.empty(shape)
    dev.dispatch("reduce_sum", outer * inner, [on_gpu(x), y], [outer, red, inner, 1.0])
    return y


def _contiguous_axes(shape: Sequence[int], axes: Sequence[int]) -> Optional[Tuple[int, int, int]]:
    """(outer, reduced, inner) sizes when ``axes`` (sorted) are one run of adjacent axes, else None."""
    if not axes or list(axes) != list(range(axes[0], axes[-1] + 1)):
        return None
    prod = lambda dims: int(np.prod(dims, dtype=np.int64)) if len(dims) else 1  # noqa: E731
    return prod(shape[:axes[0]]), prod(shape[axes[0]:axes[-1] + 1]), prod(shape[axes[-1] + 1:])


def sum_to_shape(ctx: OpContext, dY: Any, X: Any) -> Optional[Tuple[Any]]:
    """SumToShape where the summed axes are adjacent (a bias gradient: the leading axes)."""
    target = tuple(int(d) for d in X.shape)
    if not _floats(dY):
        return None
    if tuple(dY.shape) == target:
        return (dY,)
    lead = len(dY.shape) - len(target)
    if lead < 0:
        return None
    full = (1,) * lead + target
    axes = [i for i, (d, t) in enumerate(zip(dY.shape, full)) if t == 1 and d != 1 or i < lead]
    if any(t not in (1, d) for d, t in zip(dY.shape, full)):
        return None
    run = _contiguous_axes(dY.shape, axes)
    return None if run is None else (_reduce(dY, run[0], run[1], run[2], target),)


def reduce_sum(ctx: OpContext, data: Any, axes_in: Any = None, *, axes: Any = None, keepdims: int = 1,
               noop_with_empty_axes: int = 0) -> Optional[Tuple[GpuTensor]]:
    """ReduceSum over adjacent axes (given as a CPU input or attribute)."""
    if not _floats(data) or isinstance(axes_in, GpuTensor):
        return None
    chosen = axes if axes_in is None else [int(a) for a in np.asarray(axes_in).reshape(-1)]
    rank = len(data.shape)
    if not chosen:
        if noop_with_empty_axes:
            return None
        chosen = list(range(rank))
    norm = sorted(set(int(a) + rank if int(a) < 0 else int(a) for a in chosen))
    run = _contiguous_axes(data.shape, norm) if all(0 <= a < rank for a in norm) else None
    if run is None:
        return None
    shape = [1 if i in norm else d for i, d in enumerate(data.shape)] if keepdims else \
        [d for i, d in enumerate(data.shape) if i not in norm]
    return (_reduce(data, run[0], run[1], run[2], shape),)


def _labels(ctx: OpContext, op: str, labels: Any, classes: int, ignore_index: Optional[int]) -> Optional[Any]:
    """The labels as the shader takes them, checked on their host copy as the numpy kernel checks them
    (an out-of-range label is refused, never read out of bounds); None when there is no host copy."""
    host = labels.host if isinstance(labels, GpuTensor) else np.asarray(labels)
    if host is None or np.dtype(host.dtype).kind not in "iu":
        return None
    bad = (host < 0) | (host >= classes)
    if ignore_index is not None:
        bad &= host != int(ignore_index)
    if np.any(bad):
        raise KernelError("%s node %r: label %d is out of range for %d classes"
                          % (op, ctx.node_name, int(host[bad].reshape(-1)[0]), classes))
    return labels


def softmax_cross_entropy(ctx: OpContext, scores: Any, labels: Any, weights: Any = None, *,
                          ignore_index: Optional[int] = None, reduction: str = "mean") -> Optional[Tuple[Any, Any]]:
    """SoftmaxCrossEntropyLoss of (N, C) scores without class weights, reduction mean or sum."""
    if weights is not None or len(scores.shape) != 2 or reduction not in ("mean", "sum") or not _floats(scores):
        return None
    n, c = scores.shape
    if tuple(labels.shape) != (n,) or _labels(ctx, "SoftmaxCrossEntropyLoss", labels, c, ignore_index) is None:
        return None
    dev = device()
    log_prob, rows, loss = dev.empty((n, c)), dev.empty((2 * n,)), dev.empty(())
    ignore = [1, int(ignore_index)] if ignore_index is not None else [0, 0]
    dev.dispatch("softmax_ce_rows", n, [on_gpu(scores), on_gpu(labels), log_prob, rows], [n, c] + ignore)
    dev.grid("softmax_ce_total", (1, 1, 1), [rows, loss], [n, int(reduction == "mean")])
    return (loss, log_prob)


def softmax_cross_entropy_grad(ctx: OpContext, dLoss: Any, log_prob: Any, labels: Any, weights: Any = None, *,
                               reduction: str = "mean", ignore_index: Optional[int] = None) -> Optional[Tuple[Any]]:
    """SoftmaxCrossEntropyLossGrad for (N, C), no class weights, reduction mean or sum."""
    if weights is not None or len(log_prob.shape) != 2 or reduction not in ("mean", "sum") or not _floats(log_prob):
        return None
    n, c = log_prob.shape
    if int(np.prod(dLoss.shape, dtype=np.int64)) != 1 or \
            _labels(ctx, "SoftmaxCrossEntropyLossGrad", labels, c, ignore_index) is None:
        return None
    dev = device()
    dx = dev.empty((n, c))
    dloss_on_gpu = isinstance(dLoss, GpuTensor)
    d = 0.0 if dloss_on_gpu else float(np.asarray(dLoss).reshape(()))
    ignore = [1, int(ignore_index)] if ignore_index is not None else [0, 0]
    gpu_labels = on_gpu(labels)
    total = None
    if ignore_index is not None:
        total = dev.empty(())
        dev.grid("softmax_ce_count", (1, 1, 1), [gpu_labels, total], [n, int(ignore_index)])
    dev.dispatch("softmax_ce_grad", n * c, [on_gpu(log_prob), gpu_labels, dx, dLoss if dloss_on_gpu else None, total],
                 [n, c, int(reduction == "mean")] + ignore + [d, int(dloss_on_gpu)])
    return (dx,)


def _groups(tensors: Sequence[Any], size: int) -> Optional[List[Sequence[GpuTensor]]]:
    """An update node's (param, grad, state...) groups when every tensor is a float32 GPU tensor."""
    if not tensors or len(tensors) % size or not all(isinstance(t, GpuTensor) and t.dtype == _F32 for t in tensors):
        return None
    return [tensors[i:i + size] for i in range(0, len(tensors), size)]


def adam_step(ctx: OpContext, lr: Any, step: Any, *tensors: Any, beta1: float = 0.9, beta2: float = 0.999,
              epsilon: float = 1e-8, weight_decay: float = 0.0, decoupled: int = 0,
              amsgrad: int = 0) -> Optional[Tuple[Any, ...]]:
    """AdamStep in place on the GPU (every parameter and moment already there), torch's arithmetic."""
    groups = _groups(tensors, 4)
    if groups is None or amsgrad or isinstance(lr, GpuTensor) or isinstance(step, GpuTensor):
        return None
    lr_, t = float(np.asarray(lr)), int(np.asarray(step))
    kind = (1 if decoupled else 2) if weight_decay else 0
    decay = 1.0 - lr_ * weight_decay if decoupled else weight_decay
    dev = device()
    for p, g, m, v in groups:
        dev.dispatch("adam", p.size, [p, g, m, v],
                     [p.size, beta1, 1.0 - beta1, beta2, 1.0 - beta2, 1.0 / math.sqrt(1.0 - beta2 ** t), epsilon,
                      lr_ / (1.0 - beta1 ** t), kind, decay])
    return tuple(x for p, _, m, v in groups for x in (p, m, v))


def sgd_step(ctx: OpContext, lr: Any, step: Any, *tensors: Any, momentum: float = 0.0, dampening: float = 0.0,
             nesterov: int = 0, weight_decay: float = 0.0) -> Optional[Tuple[Any, ...]]:
    """Plain SGDStep (no momentum, no weight decay) in place on the GPU."""
    groups = _groups(tensors, 2)
    if groups is None or momentum or weight_decay or isinstance(lr, GpuTensor):
        return None
    dev = device()
    for p, g in groups:
        dev.dispatch("sgd", p.size, [p, g], [p.size, float(np.asarray(lr))])
    return tuple(p for p, _ in groups)


def identity(ctx: OpContext, x: Any) -> Tuple[Any]:
    return (x,)


#: (domain, op) -> the GPU kernel
KERNELS: Dict[Tuple[str, str], Kernel] = {
    ("", "Gemm"): gemm, ("", "Relu"): relu, ("", "Identity"): identity,
    ("", "Add"): _binary(0), ("", "Sub"): _binary(1), ("", "Mul"): _binary(2), ("", "Div"): _binary(3),
    ("", "ReduceSum"): reduce_sum, ("", "SoftmaxCrossEntropyLoss"): softmax_cross_entropy,
    (PYTRAIN_DOMAIN, "ReluGrad"): relu_grad, (PYTRAIN_DOMAIN, "SumToShape"): sum_to_shape,
    (PYTRAIN_DOMAIN, "SoftmaxCrossEntropyLossGrad"): softmax_cross_entropy_grad,
    (PYTRAIN_DOMAIN, "AdamStep"): adam_step, (PYTRAIN_DOMAIN, "SGDStep"): sgd_step,
}

KERNELS.update({("", "Conv"): conv.conv, (PYTRAIN_DOMAIN, "ConvGrad"): conv.conv_grad, ("", "MaxPool"): conv.max_pool,
                (PYTRAIN_DOMAIN, "MaxPoolGrad"): conv.max_pool_grad, ("", "Reshape"): conv.reshape,
                ("", "Flatten"): conv.flatten, ("", "Gather"): nn.gather, (PYTRAIN_DOMAIN, "GatherGrad"): nn.gather_grad,
                ("", "LayerNormalization"): nn.layer_normalization,
                (PYTRAIN_DOMAIN, "LayerNormalizationGrad"): nn.layer_normalization_grad,
                ("", "ReduceMean"): nn.reduce_mean, (PYTRAIN_DOMAIN, "ReduceGrad"): nn.reduce_grad,
                ("", "Softmax"): nn.softmax, (PYTRAIN_DOMAIN, "SoftmaxGrad"): nn.softmax_grad})
KERNELS.update(text.table(KERNELS))   # the text models' (tiny BERT, GPT-2 with LoRA): text.py, batched.py
KERNELS.update(batched.table(KERNELS))
KERNELS.update(gelu.table(KERNELS))   # the training model's fused GELU as its chain's dispatches

def batch_normalization(ctx: OpContext, *args: Any, training_mode: int = 0, spatial: int = 1,
                        **kw: Any) -> Optional[Tuple[Any, ...]]:
    """BatchNormalization: on the batch's statistics (training_mode=1, :mod:`.bn_train`) or the running ones."""
    if training_mode and spatial:
        return bn_train.batch_normalization_training(ctx, *args, **kw)
    return mobile.batch_normalization(ctx, *args, training_mode=training_mode, spatial=spatial, **kw)


KERNELS.update({("", "BatchNormalization"): batch_normalization, ("", "Clip"): mobile.clip,
                (PYTRAIN_DOMAIN, "BatchNormTraining"): bn_train.batchnorm_training,
                (PYTRAIN_DOMAIN, "BatchNormGrad"): bn_train.batchnorm_grad,
                (PYTRAIN_DOMAIN, "BatchNormInferenceGrad"): mobile.batchnorm_inference_grad,
                (PYTRAIN_DOMAIN, "ClipGrad"): mobile.clip_grad, ("", "GlobalAveragePool"): mobile.global_average_pool,
                (PYTRAIN_DOMAIN, "GlobalAveragePoolGrad"): mobile.global_average_pool_grad,
                ("", "AveragePool"): mobile.average_pool, (PYTRAIN_DOMAIN, "AveragePoolGrad"): mobile.average_pool_grad})

#: (domain, op) -> the inputs a CPU kernel reads only the shape and dtype of (a GPU tensor there needs no copy)
SHAPE_ONLY: Dict[Tuple[str, str], FrozenSet[int]] = {
    ("", "Shape"): frozenset([0]), ("", "Size"): frozenset([0]), ("", "CastLike"): frozenset([1]),
    (PYTRAIN_DOMAIN, "SumToShape"): frozenset([1]),
}


def _digest(a: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=32)
    h.update(("%s%s" % (a.dtype.str, a.shape)).encode())
    h.update(np.ascontiguousarray(a))
    return h.digest()


def _keep_constant(outs: Any, kept: Dict[int, Tuple[bytes, np.ndarray]]) -> Any:
    """A CPU node's outputs computed from constants and shapes alone (GPT-2's causal mask, its scalars), each as
    the read-only array ``kept`` holds while its bytes stay the same (compared by a 256-bit digest): a GPU kernel
    reading it then finds it uploaded already (:meth:`Device.constant`) instead of uploading it every step."""
    if not isinstance(outs, (tuple, list)):
        return outs
    out = list(outs)
    for j, v in enumerate(outs):
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf":
            continue
        d = _digest(v)
        hit = kept.get(j)
        if hit is None or hit[0] != d:
            v = np.array(v)   # its own copy (a kernel may reuse the buffer it returned), read-only
            v.flags.writeable = False
            hit = kept[j] = (d, v)
        out[j] = hit[1]
    return tuple(out)


def on_cpu(fn: Kernel, key: Tuple[str, str], label: str) -> Kernel:
    """``fn`` (a numpy/wasm kernel) run with CPU arrays: a GPU input as its host copy, or as a stand-in of its
    shape where the op reads only shapes; any other GPU input is refused (it would need a readback). A node whose
    inputs are all read-only arrays (the plan's constants, or such a node's outputs) or read only for their shape
    keeps its outputs as constants while they stay the same (:func:`_keep_constant`)."""
    shape_only = SHAPE_ONLY.get(key, frozenset())
    kept: Dict[int, Tuple[bytes, np.ndarray]] = {}

    def run(ctx: OpContext, *args: Any, **kw: Any) -> Any:
        cpu = list(args)
        fixed = True   # (a random op's new values are new bytes: uploaded as before)
        for i, a in enumerate(args):
            if isinstance(a, GpuTensor):
                fixed = fixed and i in shape_only
                if a.host is not None:
                    cpu[i] = a.host
                elif i in shape_only:
                    cpu[i] = a.stand_in()
                else:
                    raise GpuTransferError(   # (the plan names the node)
                        "%s has no GPU shader for this case and reads input %d, which lives on the GPU; "
                        "a GPU -> CPU copy cannot happen inside a step, so this model trains on the CPU"
                        % (key[1], i))
            elif a is not None and not (isinstance(a, np.ndarray) and not a.flags.writeable):
                fixed = fixed and i in shape_only
        out = fn(ctx, *cpu, **kw)
        return _keep_constant(out, kept) if fixed else out
    return run


def choose(op_type: str, domain: str, info: KernelInfo, label: str) -> Kernel:
    """The kernel a GPU plan runs for an op: its shader, falling back to the CPU kernel for cases the shader
    declines, or the CPU kernel alone (see :func:`on_cpu`)."""
    key = (domain or "", op_type)
    cpu = on_cpu(info.fn, key, label)
    gpu = KERNELS.get(key)
    if gpu is None:
        return cpu

    def run(ctx: OpContext, *args: Any, **kw: Any) -> Any:
        out = gpu(ctx, *args, **kw)
        return cpu(ctx, *args, **kw) if out is None else out
    return run
