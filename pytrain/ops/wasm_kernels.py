"""The browser's WebAssembly kernels (web/kernels/*.c, linked into one gemm.wasm), working in
place on numpy's buffers inside Pyodide's heap: the SIMD GEMM, the one-pass Adam update,
im2col/col2im, MaxPool, Relu and SoftmaxCrossEntropyLoss with their gradients, and 2-D
transposes.

The page links gemm.wasm into Pyodide and registers it as the module ``pytrain_wasm_gemm``
(see ``pythonModule`` in web/kernels/gemm.js). :func:`install` then routes those operations
through them; small products and arrays stay on numpy, where the Python -> JS -> wasm call
would cost more than it saves.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

try:  # only present in a page that registered the kernel
    import pytrain_wasm_gemm as _wasm  # type: ignore
except ImportError:
    _wasm = None

# Below this many multiply-adds the Python -> JS -> wasm call (~10 us) costs more
# than it saves; bench/pages/gemm.html measures the crossover.
MIN_MACS = 65536

#: What runs when the kernel does not (small or non-float32 products): pytrain's
#: previous linalg backend when installed through install(), else numpy.
FALLBACK = np.matmul


def available() -> bool:
    return _wasm is not None


def _ptr(x: np.ndarray) -> int:
    """Byte address of x's first element in the wasm heap (numpy's data pointer)."""
    return x.__array_interface__["data"][0]


def _layout(x: np.ndarray) -> Optional[Tuple[int, int]]:
    """(trans, leading dimension) describing a 2-D float32 view for sgemm, or None.

    A row-major matrix (possibly a row slice of a wider one) is (0, row stride);
    a transposed view such as ``w.T`` is (1, column stride), so Gemm's transB and
    the gradients' transposes never copy.
    """
    rows, cols = x.shape
    s0, s1 = x.strides
    if s0 % 4 or s1 % 4:
        return None
    if (s1 == 4 or cols == 1) and (s0 >= 4 * cols or rows == 1):
        return 0, max(cols, s0 // 4 if rows > 1 else cols)
    if (s0 == 4 or rows == 1) and (s1 >= 4 * rows or cols == 1):
        return 1, max(rows, s1 // 4 if cols > 1 else rows)
    return None


def matmul2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for 2-D float32 operands, on the wasm kernel when it is worth it."""
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError("matmul2d: shapes %s and %s do not align" % (a.shape, b.shape))
    if (_wasm is None or a.dtype != np.float32 or b.dtype != np.float32
            or m * n * k < MIN_MACS or m == 0 or n == 0):
        return FALLBACK(a, b)
    la = _layout(a)
    if la is None:
        a = np.ascontiguousarray(a)
        la = (0, k)
    lb = _layout(b)
    if lb is None:
        b = np.ascontiguousarray(b)
        lb = (0, n)
    c = np.empty((m, n), dtype=np.float32)
    if k == 0:
        c.fill(0.0)
        return c
    # Arguments are plain ints/floats: Pyodide passes them to JS as numbers, and
    # the wasm function reads the operands straight from the shared heap.
    _wasm.sgemm(la[0], lb[0], m, n, k, 1.0, _ptr(a), la[1], _ptr(b), lb[1], 0.0, _ptr(c), n)
    return c


def adam(groups, lr: float, step: int, beta1: float, beta2: float, epsilon: float, weight_decay: float,
         decoupled: int) -> bool:
    """One Adam/AdamW update of every (param, grad, m, v) group in place, one pass each and one call
    for all (web/kernels/optim.c); False when any array is not contiguous float32 of its
    parameter's size, leaving the update to numpy."""
    if _wasm is None:
        return False
    table = []
    for group in groups:
        n = group[0].size
        for a in group:
            if a.dtype != np.float32 or not a.flags.c_contiguous or a.size != n:
                return False
        table += [n] + [_ptr(a) for a in group]
    table = np.array(table, dtype=np.int32)
    # the same float32 constants the numpy path multiplies by (op_optimizers._adam_update)
    _wasm.adam(_ptr(table), len(groups), 1.0 - beta1, beta1, 1.0 - beta2, beta2,
               1.0 / math.sqrt(1.0 - beta2 ** step), epsilon, lr / (1.0 - beta1 ** step), weight_decay,
               int(decoupled), 1.0 - lr * weight_decay)
    return True


def columns(xt: np.ndarray, win) -> Optional[np.ndarray]:
    """conv_columns' matrix (C*K, L*N) for a 2-D convolution of the padded float32 input ``xt`` in
    the batch-last layout (C, H, W, N) (web/kernels/im2col.c); None for other cases, which numpy
    handles."""
    if win.rank != 2 or xt.dtype != np.float32 or not xt.flags.c_contiguous:
        return None
    c, h, w, n = xt.shape
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    cols = np.empty((c * kh * kw, oh * ow * n), dtype=np.float32)
    if cols.size:
        _wasm.im2col(_ptr(xt), _ptr(cols), n, c, h, w, kh, kw, oh, ow, win.strides[0], win.strides[1],
                     win.dilations[0], win.dilations[1])
    return cols


def columns_adjoint(cols: np.ndarray, win) -> Optional[np.ndarray]:
    """conv_columns_adjoint's padded batch-last (C, H, W, N) sum for a 2-D convolution
    (web/kernels/im2col.c); ``cols`` is C-contiguous (C*K, L*N)."""
    if win.rank != 2 or cols.dtype != np.float32:
        return None
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    c = cols.shape[0] // (kh * kw)
    n = cols.shape[1] // (oh * ow)
    h, w = win.padded_shape
    xt = np.zeros((c, h, w, n), dtype=np.float32)
    if cols.size:
        _wasm.col2im(_ptr(cols), _ptr(xt), n, c, h, w, kh, kw, oh, ow, win.strides[0], win.strides[1],
                     win.dilations[0], win.dilations[1])
    return xt


def max_pool(xp: np.ndarray, win, want_indices: bool,
             storage_order: int) -> Optional[Tuple[np.ndarray, Optional[np.ndarray]]]:
    """MaxPool's (Y, Indices) for a 2-D window over the padded float32 input ``xp``
    (web/kernels/pool.c); None for other cases, which numpy handles."""
    if win.rank != 2 or xp.dtype != np.float32 or not xp.flags.c_contiguous:
        return None
    n, c, hp, wp = xp.shape
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    y = np.empty((n, c, oh, ow), dtype=np.float32)
    idx = np.empty((n, c, oh, ow), dtype=np.int64) if want_indices else None
    if y.size:
        _wasm.maxpool2d(_ptr(xp), _ptr(y), _ptr(idx) if want_indices else 0, n * c, hp, wp, kh, kw, oh, ow,
                        win.strides[0], win.strides[1], win.dilations[0], win.dilations[1],
                        win.in_shape[0], win.in_shape[1], win.pads_begin[0], win.pads_begin[1],
                        int(storage_order))
    return y, idx


#: Below this many elements numpy's own pass is as quick as the call into wasm.
MIN_ELEMENTS = 1024


def _plain(*arrays: np.ndarray, min_size: int = MIN_ELEMENTS) -> bool:
    """All C-contiguous float32 of one shape, and enough elements to be worth a wasm call."""
    a0 = arrays[0]
    return a0.size >= min_size and all(
        a.dtype == np.float32 and a.flags.c_contiguous and a.shape == a0.shape for a in arrays)


def transpose(a: np.ndarray) -> Optional[np.ndarray]:
    """``a.T`` of a C-contiguous 2-D float32 array, as a new C-contiguous array (transpose.c)."""
    if a.ndim != 2 or not _plain(a):
        return None
    rows, cols = a.shape
    out = np.empty((cols, rows), dtype=np.float32)
    _wasm.transpose(_ptr(a), _ptr(out), rows, cols)
    return out


def relu(ctx, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """Relu (elementwise.c), for registry.accelerate."""
    if not _plain(X):
        return None
    y = np.empty_like(X)
    _wasm.relu(_ptr(X), _ptr(y), X.size)
    return (y,)


def relu_grad(ctx, dY: np.ndarray, Y: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """ReluGrad (elementwise.c), for registry.accelerate."""
    if not _plain(dY, Y):
        return None
    dx = np.empty_like(dY)
    _wasm.relu_grad(_ptr(dY), _ptr(Y), _ptr(dx), dY.size)
    return (dx,)


def max_pool_grad(ctx, dY: np.ndarray, Indices: np.ndarray, X: np.ndarray, *,
                  storage_order: int = 0) -> Optional[Tuple[np.ndarray]]:
    """MaxPoolGrad (pool.c), for registry.accelerate: row-major Indices only, and any index out
    of range hands the node back to the numpy kernel, which reports it."""
    if (storage_order != 0 or not _plain(dY) or X.dtype != np.float32 or Indices.dtype != np.int64
            or not Indices.flags.c_contiguous or Indices.shape != dY.shape):
        return None
    dx = np.zeros(X.shape, dtype=np.float32)
    if _wasm.maxpool_grad(_ptr(dY), _ptr(Indices), _ptr(dx), dY.size, dx.size):
        return None
    return (dx,)


def sum_to_shape(ctx, dY: np.ndarray, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """SumToShape's commonest case, a bias gradient: (N, C) summed over N into (C,) or (1, C)
    (elementwise.c, numpy's row-by-row order, so the same bits), for registry.accelerate."""
    if (dY.ndim != 2 or dY.shape[0] < 2 or tuple(X.shape) not in ((dY.shape[1],), (1, dY.shape[1]))
            or not _plain(dY, min_size=1)):
        return None
    out = np.empty(X.shape, dtype=np.float32)
    _wasm.sum_rows(_ptr(dY), _ptr(out), dY.shape[0], dY.shape[1])
    return (out,)


def _labels_ok(labels: np.ndarray, n: int) -> bool:
    return labels.dtype == np.int64 and labels.shape == (n,) and labels.flags.c_contiguous


def _ignores(labels: np.ndarray, ignore_index: Optional[int]) -> bool:
    """Whether ignore_index changes anything: a label equals it (torch's default -100 is set on
    every CrossEntropyLoss; a batch without such labels still takes the fast kernel)."""
    return ignore_index is not None and bool(np.any(np.asarray(labels) == int(ignore_index)))


def softmax_cross_entropy(ctx, scores: np.ndarray, labels: np.ndarray, weights: Optional[np.ndarray] = None, *,
                          ignore_index: Optional[int] = None, reduction: str = "mean"):
    """SoftmaxCrossEntropyLoss of (N, C) scores without weights or ignore_index (softmax_ce.c), for
    registry.accelerate, at any size (what it saves is a dozen numpy calls, not arithmetic); the
    kernel declines rows with NaN/inf and labels out of range."""
    if (weights is not None or _ignores(labels, ignore_index) or reduction not in ("mean", "sum")
            or scores.ndim != 2 or scores.shape[0] == 0 or not _plain(scores, min_size=1)
            or not _labels_ok(labels, scores.shape[0])):
        return None
    n, c = scores.shape
    log_prob = np.empty_like(scores) if ctx.wants(1) else None
    loss = np.empty((), dtype=np.float32)
    if _wasm.softmax_ce(_ptr(scores), _ptr(labels), n, c, _ptr(log_prob) if log_prob is not None else 0,
                        int(reduction == "mean"), _ptr(loss)):
        return None
    return (loss, log_prob)


def softmax_cross_entropy_grad(ctx, dLoss: np.ndarray, log_prob: np.ndarray, labels: np.ndarray,
                               weights: Optional[np.ndarray] = None, *, reduction: str = "mean",
                               ignore_index: Optional[int] = None):
    """SoftmaxCrossEntropyLossGrad for the same cases (softmax_ce.c), for registry.accelerate."""
    if (weights is not None or _ignores(labels, ignore_index) or reduction not in ("mean", "sum")
            or log_prob.ndim != 2 or log_prob.shape[0] == 0 or not _plain(log_prob, min_size=1)
            or not _labels_ok(labels, log_prob.shape[0]) or np.size(dLoss) != 1):
        return None
    n, c = log_prob.shape
    coef = float(np.asarray(dLoss).reshape(())) / (n if reduction == "mean" else 1)
    dx = np.empty_like(log_prob)
    if _wasm.softmax_ce_grad(_ptr(log_prob), _ptr(labels), n, c, coef, _ptr(dx)):
        return None
    return (dx,)


def install() -> bool:
    """Route pytrain's 2-D float32 products and transposes (pytrain.ops.linalg), Adam updates
    (op_optimizers.set_adam_backend), convolution columns (windows.set_columns_backend), 2-D
    MaxPool (op_maxpool.set_backend), Relu, ReluGrad, MaxPoolGrad, SumToShape's bias case and
    SoftmaxCrossEntropyLoss with its gradient (registry.accelerate) through the kernels."""
    global FALLBACK
    if _wasm is None:
        return False
    from pytrain.ops import linalg, registry, windows
    from pytrain.ops.nn import op_maxpool
    from pytrain.ops.train import op_optimizers

    previous = linalg.set_backend(matmul2d)
    if previous is not None and previous is not matmul2d:
        FALLBACK = previous
    if hasattr(_wasm, "adam"):  # a page may register the GEMM alone
        op_optimizers.set_adam_backend(adam)
    if hasattr(_wasm, "im2col") and hasattr(_wasm, "col2im"):
        windows.set_columns_backend(columns, columns_adjoint)
    if hasattr(_wasm, "maxpool2d"):
        op_maxpool.set_backend(max_pool)
    if hasattr(_wasm, "transpose"):
        linalg.set_transpose_backend(transpose)
    if hasattr(_wasm, "relu") and hasattr(_wasm, "relu_grad"):
        registry.accelerate("Relu", relu)
        registry.accelerate("ReluGrad", relu_grad, registry.PYTRAIN_DOMAIN)
    if hasattr(_wasm, "maxpool_grad"):
        registry.accelerate("MaxPoolGrad", max_pool_grad, registry.PYTRAIN_DOMAIN)
    if hasattr(_wasm, "sum_rows"):
        registry.accelerate("SumToShape", sum_to_shape, registry.PYTRAIN_DOMAIN)
    if hasattr(_wasm, "softmax_ce") and hasattr(_wasm, "softmax_ce_grad"):
        registry.accelerate("SoftmaxCrossEntropyLoss", softmax_cross_entropy)
        registry.accelerate("SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_grad, registry.PYTRAIN_DOMAIN)
    return True
