"""The browser's WebAssembly kernels (web/kernels/*.c, linked into one gemm.wasm), working in
place on numpy's buffers inside Pyodide's heap: the SIMD GEMM (also a stack of them in one call),
the one-pass Adam update and the finite-gradient guard before it, im2col/col2im, MaxPool, Relu and
SoftmaxCrossEntropyLoss with their gradients, 2-D transposes; and for the real models
(nn_more.c, norm_more.c) Clip, inference BatchNormalization, depthwise and pointwise Conv (and the
Clip of pytrain.fusion's FusedConv), Exp, Erf, LayerNormalization and its gradient, Softmax and
Gather's gradient.

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
    import pytrain_wasm_gemm as _js  # type: ignore
except ImportError:
    _js = None


class _Kernels:
    """The page's kernel functions, looked up once: reading an attribute of Pyodide 0.17's JsProxy
    module costs ~3.5 us (measured in Chromium), as much as the call itself, on every call."""

    def __init__(self, js) -> None:
        for name in dir(js):
            if not name.startswith("_"):
                value = getattr(js, name)
                if value is not None:  # an older gemm.js hands Python None for exports it lacks
                    setattr(self, name, value)


_wasm = _Kernels(_js) if _js is not None else None
_F32 = np.dtype(np.float32)

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


def matmul_batched(a: np.ndarray, b: np.ndarray) -> Optional[np.ndarray]:
    """A stack of float32 products with equal batch shapes (..., m, k) @ (..., k, n) in one call
    (nn_more.c's loop over sgemm), for linalg.set_batched_backend; None for other cases. Operands
    may be transposed views (MatMulGrad's swapaxes) as long as the batch axes fold into one stride."""
    if a.dtype != np.float32 or b.dtype != np.float32 or a.shape[:-2] != b.shape[:-2]:
        return None
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    count = int(np.prod(a.shape[:-2]))
    if k != k2 or m == 0 or n == 0 or k == 0 or count == 0 or count * m * n * k < MIN_MACS:
        return None
    a3 = a.reshape((count, m, k))  # a view when the batch axes fold (numpy copies otherwise)
    b3 = b.reshape((count, k, n))
    la, lb = _layout(a3[0]), _layout(b3[0])
    if la is None or lb is None or a3.strides[0] % 4 or b3.strides[0] % 4:
        return None
    c = np.empty(a.shape[:-2] + (m, n), dtype=np.float32)
    _wasm.sgemm_batched(count, la[0], lb[0], m, n, k, _ptr(a3), a3.strides[0] // 4, la[1],
                        _ptr(b3), b3.strides[0] // 4, lb[1], _ptr(c), m * n, n)
    return c


def gemm(ctx, A: np.ndarray, B: np.ndarray, C: Optional[np.ndarray] = None, *, alpha: float = 1.0,
         beta: float = 1.0, transA: int = 0, transB: int = 0) -> Optional[Tuple[np.ndarray]]:
    """ONNX Gemm with alpha = beta = 1 (what Linear layers export) in one call, product and bias
    (nn_more.c), for registry.accelerate; the numpy kernel takes small products and the rest."""
    if A.ndim != 2 or B.ndim != 2 or A.dtype != _F32 or B.dtype != _F32 or alpha != 1.0:
        return None
    a = A.T if transA else A
    b = B.T if transB else B
    m, k = a.shape
    k2, n = b.shape
    if k != k2 or m * n * k < MIN_MACS or k == 0:
        return None
    c_kind = 0
    if C is not None and beta != 0.0:
        if beta != 1.0 or C.dtype != _F32 or not C.flags.c_contiguous:
            return None
        if C.shape == (n,) or C.shape == (1, n):
            c_kind = 1
        elif C.shape == (m, n):
            c_kind = 2
        else:
            return None
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None:
        return None
    y = np.empty((m, n), dtype=np.float32)
    _wasm.gemm(la[0], lb[0], m, n, k, _ptr(a), la[1], _ptr(b), lb[1], _ptr(C) if c_kind else 0, c_kind, _ptr(y))
    return (y,)


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
    """All C-contiguous float32 of one shape, and enough elements to be worth a wasm call.
    (A plain loop: this runs before every accelerated node, and a generator under all() cost
    8 us in Pyodide against ~1 us.)"""
    a0 = arrays[0]
    if a0.size < min_size:
        return False
    shape = a0.shape
    for a in arrays:
        if a.dtype != _F32 or not a.flags.c_contiguous or a.shape != shape:
            return False
    return True


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


#: Below this many elements numpy's own binary ufunc is as quick as the checks and the call
MIN_BINARY_ELEMENTS = 4096


def _binary(op: int):
    """Add/Sub/Mul/Div (op 0-3) of float32 tensors (elementwise.c) for registry.accelerate: a scalar
    operand or a trailing-axes broadcast (a bias row) on either side, and equal shapes for Div, the
    result of the larger operand's shape. Measured in Chromium (Pyodide 0.17, BERT's 32x32x512):
    numpy's broadcasting loops and its division are 3-8x slower than the kernel, its same-shape
    add and multiply are not (0.16 ms against 0.24 for 524k products), so those stay with numpy,
    as do other broadcasts."""
    def run(ctx, A: np.ndarray, B: np.ndarray) -> Optional[Tuple[np.ndarray]]:
        if A.dtype != _F32 or B.dtype != _F32 or not A.flags.c_contiguous or not B.flags.c_contiguous:
            return None
        big, small, swap = (B, A, 1) if A.size < B.size else (A, B, 0)
        n, k = big.size, small.size
        if n < MIN_BINARY_ELEMENTS or small.ndim > big.ndim:
            return None  # (a size-1 operand with more axes would widen the output's shape)
        if k == n:
            if op != 3 or A.shape != B.shape:
                return None
        elif k != 1 and tuple(small.shape) != tuple(big.shape[big.ndim - small.ndim:]):
            return None
        y = np.empty(big.shape, dtype=np.float32)
        _wasm.binary(op, _ptr(big), _ptr(small), _ptr(y), n, k, swap)
        return (y,)
    return run


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
    """SumToShape's commonest case, a bias gradient: dY summed over its leading axes into X's
    trailing shape ((N, C) into (C,) or (1, C); a transformer's (B, T, C) into (C,)) by
    elementwise.c, adding the rows in order as numpy reduces leading axes, so the same bits; for
    registry.accelerate."""
    shape = tuple(X.shape)
    tail = shape
    while tail and tail[0] == 1:
        tail = tail[1:]
    lead = dY.ndim - len(tail)
    if (lead < 1 or tuple(dY.shape[lead:]) != tail or len(shape) > dY.ndim
            or not _plain(dY, min_size=1)):
        return None
    cols = 1
    for d in tail:
        cols *= d
    rows = dY.size // cols if cols else 0
    if rows < 2:
        return None
    out = np.empty(shape, dtype=np.float32)
    _wasm.sum_rows(_ptr(dY), _ptr(out), rows, cols)
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


# --- the real models' hot spots (web/kernels/nn_more.c): MobileNetV2's frozen backbone and BERT's GELU


def _scalar_bound(v: Optional[np.ndarray], dtype, default: float) -> Optional[float]:
    """Clip's optional min/max input as the float the kernel compares with (None: not a scalar)."""
    if v is None:
        return default
    v = np.asarray(v)
    if v.size != 1:
        return None
    return float(v.reshape(()).astype(dtype))


def clip(ctx, input: np.ndarray, min: Optional[np.ndarray] = None,
         max: Optional[np.ndarray] = None) -> Optional[Tuple[np.ndarray]]:
    """Clip of a float32 tensor with scalar bounds in one pass (nn_more.c), for registry.accelerate."""
    if not _plain(input):
        return None
    lo = _scalar_bound(min, np.float32, -math.inf)
    hi = _scalar_bound(max, np.float32, math.inf)
    if lo is None or hi is None:
        return None  # the numpy kernel names the bad bound
    y = np.empty_like(input)
    _wasm.clip(_ptr(input), _ptr(y), input.size, lo, hi)
    return (y,)


def _unary(fn):
    """An element-wise float32 kernel ``fn(x, y, n)`` (Exp, Erf) as a registry.accelerate kernel."""
    def run(ctx, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
        if not _plain(X):
            return None
        y = np.empty_like(X)
        fn(_ptr(X), _ptr(y), X.size)
        return (y,)
    return run


def batch_normalization(ctx, X: np.ndarray, scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray,
                        input_var: np.ndarray, *, epsilon: float = 1e-5, momentum: float = 0.9,
                        training_mode: int = 0, spatial: int = 1) -> Optional[Tuple[np.ndarray]]:
    """Inference-mode BatchNormalization of float32 (N, C, ...) in one pass (nn_more.c), for
    registry.accelerate; the per-channel a, b are computed exactly as the numpy kernel does."""
    if training_mode or not spatial or X.ndim < 2 or not _plain(X):
        return None
    c = X.shape[1]
    for v in (scale, B, input_mean, input_var):
        if v.shape != (c,) or v.dtype != np.float32:
            return None
    t = np.float32
    a = np.ascontiguousarray(scale / np.sqrt(input_var + t(epsilon)), dtype=np.float32)
    b = np.ascontiguousarray(B - input_mean * a, dtype=np.float32)
    y = np.empty_like(X)
    _wasm.channel_affine(_ptr(X), _ptr(y), _ptr(a), _ptr(b), X.shape[0], c, X.size // max(1, X.shape[0] * c))
    return (y,)


def conv(ctx, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None, *, auto_pad: str = "NOTSET",
         dilations=None, group: int = 1, kernel_shape=None, pads=None,
         strides=None) -> Optional[Tuple[np.ndarray]]:
    """2-D float32 Conv in one call for the two shapes im2col serves worst (nn_more.c), for
    registry.accelerate: depthwise (group == C, one input channel per filter) and pointwise
    (1x1, stride 1, no padding, group 1). Anything else, or anything malformed, goes to numpy."""
    from pytrain.ops.windows import geometry

    if (X.ndim != 4 or W.ndim != 4 or X.dtype != np.float32 or W.dtype != np.float32
            or not X.flags.c_contiguous or not W.flags.c_contiguous or X.size == 0 or W.size == 0):
        return None
    n, c, h, w = X.shape
    m, cg, kh, kw = W.shape
    group = int(group)
    if kernel_shape and tuple(kernel_shape) != (kh, kw):
        return None
    if B is not None and (B.shape != (m,) or B.dtype != np.float32 or not B.flags.c_contiguous):
        return None
    depthwise = group == c and group > 1 and cg == 1 and m % c == 0
    pointwise = group == 1 and cg == c and kh == 1 and kw == 1
    if not (depthwise or pointwise):
        return None
    try:
        win = geometry("Conv", X.shape, (kh, kw), strides, dilations, pads, auto_pad)
    except Exception:
        return None  # the numpy kernel raises the proper error
    oh, ow = win.out_shape
    if oh <= 0 or ow <= 0:
        return None
    y = np.empty((n, m, oh, ow), dtype=np.float32)
    bias = _ptr(B) if B is not None else 0
    if depthwise:
        _wasm.depthwise_conv2d(_ptr(X), _ptr(W), bias, _ptr(y), n, c, m // c, h, w, kh, kw, oh, ow,
                               win.strides[0], win.strides[1], win.dilations[0], win.dilations[1],
                               win.pads_begin[0], win.pads_begin[1])
        return (y,)
    if tuple(win.strides) != (1, 1) or any(win.pads_begin) or (oh, ow) != (h, w) or m * h * w * c < MIN_MACS:
        return None
    s = h * w
    # few positions per image: the images side by side in one product, through scratch (nn_more.c)
    tmp = np.empty((c + m) * n * s, dtype=np.float32) if s < CONV1X1_BATCHED_BELOW else None
    _wasm.conv1x1(_ptr(X), _ptr(W), bias, _ptr(y), n, c, m, s, _ptr(tmp) if tmp is not None else 0)
    return (y,)


#: Below this many positions per image a pointwise Conv puts the images side by side in one product
#: (in Node: 16 images of 6x6, 32 -> 192 channels 0.73 -> 0.17 ms; of 24x24, 48 -> 8: 0.16 vs 0.28 ms).
CONV1X1_BATCHED_BELOW = 128


def _row_vector(v: Optional[np.ndarray], tail: Tuple[int, ...]) -> Optional[np.ndarray]:
    """LayerNormalization's Scale/B as one float32 per normalised element, or None when it is
    not exactly of the normalised shape (broadcast forms stay with numpy)."""
    if v is None or v.dtype != np.float32 or tuple(v.shape) != tuple(tail):
        return None
    return np.ascontiguousarray(v).reshape(-1)


def layer_normalization(ctx, X: np.ndarray, Scale: np.ndarray, B: Optional[np.ndarray] = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1):
    """LayerNormalization of float32 X over its last axes with float32 statistics, Scale (and B) of
    the normalised shape, in one call (norm_more.c), for registry.accelerate."""
    a = axis + X.ndim if axis < 0 else axis
    if stash_type != 1 or not 0 <= a < X.ndim or not _plain(X, min_size=1) or X.size == 0:
        return None
    rows = int(np.prod(X.shape[:a]))
    n = X.size // rows
    scale = _row_vector(Scale, X.shape[a:])
    bias = _row_vector(B, X.shape[a:]) if B is not None else None
    if scale is None or (B is not None and bias is None):
        return None
    y = np.empty_like(X)
    stat_shape = X.shape[:a] + (1,) * (X.ndim - a)
    mean = np.empty(stat_shape, dtype=np.float32) if ctx.wants(1) else None
    inv_std = np.empty(stat_shape, dtype=np.float32) if ctx.wants(2) else None
    _wasm.layernorm(_ptr(X), _ptr(scale), _ptr(bias) if bias is not None else 0, _ptr(y),
                    _ptr(mean) if mean is not None else 0, _ptr(inv_std) if inv_std is not None else 0,
                    rows, n, float(np.float32(epsilon)))
    return (y, mean, inv_std)


def layer_normalization_grad(ctx, dY: np.ndarray, X: np.ndarray, Scale: np.ndarray, Mean: np.ndarray,
                             InvStdDev: np.ndarray, *, axis: int = -1, epsilon: float = 1e-5):
    """LayerNormalizationGrad for float32 tensors and float32 saved statistics (norm_more.c), for
    registry.accelerate."""
    a = axis + X.ndim if axis < 0 else axis
    if not 0 <= a < X.ndim or not _plain(dY, X, min_size=1) or X.size == 0:
        return None
    rows = int(np.prod(X.shape[:a]))
    n = X.size // rows
    scale = _row_vector(Scale, X.shape[a:])
    if scale is None or dY.shape != X.shape:
        return None
    for s in (Mean, InvStdDev):
        if s.dtype != np.float32 or s.size != rows or not s.flags.c_contiguous:
            return None
    dx = np.empty_like(X) if ctx.wants(0) else None
    dscale = np.empty(Scale.shape, dtype=np.float32) if ctx.wants(1) else None
    dbias = np.empty(Scale.shape, dtype=np.float32) if ctx.wants(2) else None
    _wasm.layernorm_grad(_ptr(dY), _ptr(X), _ptr(scale), _ptr(Mean), _ptr(InvStdDev),
                         _ptr(dx) if dx is not None else 0, _ptr(dscale) if dscale is not None else 0,
                         _ptr(dbias) if dbias is not None else 0, rows, n)
    return (dx, dscale, dbias)


def softmax(ctx, input: np.ndarray, *, axis: int = -1) -> Optional[Tuple[np.ndarray]]:
    """Softmax over the last axis of a float32 tensor (norm_more.c), for registry.accelerate; rows
    with NaN or infinities hand the node to numpy."""
    if input.ndim == 0 or axis not in (-1, input.ndim - 1) or not _plain(input, min_size=1) \
            or input.shape[-1] == 0:
        return None
    y = np.empty_like(input)
    n = input.shape[-1]
    if _wasm.softmax(_ptr(input), _ptr(y), input.size // n, n):
        return None
    return (y,)


def gather_grad(ctx, dY: np.ndarray, indices: np.ndarray, X: np.ndarray, *, axis: int = 0):
    """GatherGrad along axis 0 (an embedding's backward) with int64 indices (norm_more.c), for
    registry.accelerate; an index out of range hands the node to numpy, which reports it."""
    if axis not in (0, -X.ndim) or X.ndim == 0 or not _plain(dY, min_size=1) or indices.dtype != np.int64 \
            or not indices.flags.c_contiguous:
        return None
    rows = X.shape[0]
    inner = int(np.prod(X.shape[1:]))
    if dY.size != indices.size * inner or rows == 0:
        return None
    dx = np.zeros(X.shape, dtype=np.float32)
    acc = np.empty(rows * inner, dtype=np.float64)
    seen = np.zeros(rows, dtype=np.int32)
    if _wasm.gather_grad(_ptr(dY), _ptr(indices), indices.size, _ptr(dx), _ptr(acc), _ptr(seen), rows, inner):
        return None
    return (dx,)


def fused_conv(ctx, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], scale: np.ndarray, bias: np.ndarray,
               mean: np.ndarray, var: np.ndarray, clip_min: Optional[np.ndarray] = None,
               clip_max: Optional[np.ndarray] = None, **attrs):
    """pytrain.fusion's FusedConv with its Clip (MobileNet's Conv + BatchNormalization + ReLU6): the
    numpy kernel folds the normalisation and runs the convolution (through the accelerated Conv),
    told not to clip; the clip then runs in place in one wasm pass (nn_more.c) instead of numpy's
    per-element branching np.clip. For registry.accelerate."""
    from pytrain.ops.registry import PYTRAIN_DOMAIN, get_kernel

    if not attrs.get("clip") or X.dtype != _F32 or W.dtype != _F32:
        return None  # nothing to add: the numpy kernel already runs the accelerated Conv
    lo = _scalar_bound(clip_min, np.float32, -math.inf)
    hi = _scalar_bound(clip_max, np.float32, math.inf)
    if lo is None or hi is None:
        return None  # the numpy kernel names the bad bound
    attrs["clip"] = 0
    y, = get_kernel("FusedConv", PYTRAIN_DOMAIN).numpy_fn(ctx, X, W, B, scale, bias, mean, var, clip_min,
                                                          clip_max, **attrs)
    if not _plain(y, min_size=1):
        y = np.minimum(np.maximum(y, np.float32(lo)), np.float32(hi)).astype(y.dtype, copy=False)
        return (y,)
    _wasm.clip(_ptr(y), _ptr(y), y.size, lo, hi)
    return (y,)


def first_non_finite(values) -> Optional[int]:
    """pytrain.module._first_non_finite in one call for every array (optim.c): the index of the
    first float array holding a NaN or an infinity, or -1; None (numpy decides) unless every float
    array is C-contiguous float32. Integer arrays are never non-finite."""
    table = []
    for v in values:
        if v.dtype.kind != "f":
            table += [0, 0]
        elif v.dtype != _F32 or not v.flags.c_contiguous:
            return None
        else:
            table += [v.size, _ptr(v) if v.size else 0]
    if not table:
        return -1
    t = np.array(table, dtype=np.int32)
    return int(_wasm.first_non_finite(_ptr(t), len(table) // 2))


def install() -> bool:
    """Route pytrain's 2-D float32 products, stacks of products and transposes (pytrain.ops.linalg),
    Adam updates (op_optimizers.set_adam_backend), the finite-gradient guard
    (module.set_finite_backend), convolution columns (windows.set_columns_backend), 2-D MaxPool
    (op_maxpool.set_backend), and through registry.accelerate Relu, ReluGrad, MaxPoolGrad,
    SumToShape's bias case, SoftmaxCrossEntropyLoss with its gradient, Clip, FusedConv's clip,
    BatchNormalization (inference), Conv (depthwise, pointwise), Exp, Erf, LayerNormalization with
    its gradient, Softmax and GatherGrad through the kernels."""
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
    if getattr(_wasm, "sgemm_batched", None) is not None and hasattr(linalg, "set_batched_backend"):
        linalg.set_batched_backend(matmul_batched)
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
    if getattr(_wasm, "binary", None) is not None:
        for code, op in enumerate(("Add", "Sub", "Mul", "Div")):
            registry.accelerate(op, _binary(code))
    # nn_more.c
    if getattr(_wasm, "gemm", None) is not None:
        registry.accelerate("Gemm", gemm)
    if getattr(_wasm, "clip", None) is not None:
        registry.accelerate("Clip", clip)
        registry.accelerate("FusedConv", fused_conv, registry.PYTRAIN_DOMAIN)  # pytrain/fusion.py's node
    if getattr(_wasm, "channel_affine", None) is not None:
        registry.accelerate("BatchNormalization", batch_normalization)
    if getattr(_wasm, "depthwise_conv2d", None) is not None and getattr(_wasm, "conv1x1", None) is not None:
        registry.accelerate("Conv", conv)
    if getattr(_wasm, "exp", None) is not None:
        registry.accelerate("Exp", _unary(_wasm.exp))
    if getattr(_wasm, "erf", None) is not None:
        registry.accelerate("Erf", _unary(_wasm.erf))
    if getattr(_wasm, "first_non_finite", None) is not None:
        from pytrain import module

        if hasattr(module, "set_finite_backend"):
            module.set_finite_backend(first_non_finite)
    # norm_more.c
    if getattr(_wasm, "layernorm", None) is not None and getattr(_wasm, "layernorm_grad", None) is not None:
        registry.accelerate("LayerNormalization", layer_normalization)
        registry.accelerate("LayerNormalizationGrad", layer_normalization_grad, registry.PYTRAIN_DOMAIN)
    if getattr(_wasm, "softmax", None) is not None:
        registry.accelerate("Softmax", softmax)
    if getattr(_wasm, "gather_grad", None) is not None:
        registry.accelerate("GatherGrad", gather_grad, registry.PYTRAIN_DOMAIN)
    return True
