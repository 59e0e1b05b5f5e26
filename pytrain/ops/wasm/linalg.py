"""Matrix products and transposes on the wasm kernels (gemm.c's sgemm, gemm_ops.c's bias and
batched forms, transpose.c): pytrain.ops.linalg's backends and the Gemm node.
"""
from __future__ import annotations

import weakref
from typing import Dict, Optional, Tuple

import numpy as np

from pytrain.ops.wasm import F32, plain, ptr, kernels, threaded


# Below this many multiply-adds the Python -> JS -> wasm call (~10 us) costs more
# than it saves; bench/pages/gemm.html measures the crossover.
MIN_MACS = 65536

#: From this many multiply-adds a product (or a stack of them) is handed to the page's helper threads
#: (web/kernels/kernels.js startThreads: only in a cross-origin isolated page), which then decide per call
#: shape from what they measure whether to split it or run it on the calling thread alone (a shape's first
#: calls are timed both ways, then the faster runs and the other is re-timed now and then): below this
#: size a split never paid even on a quiet machine (bench/threads_bench.py: 2.1M multiply-adds lost in
#: every pass, x1.11-1.17), so those products are not even timed. A fixed threshold (16.8M, tuned quiet)
#: made 2 threads lose to 1 on a busy machine and on GPT-2 LoRA's step (107.5 against 77.8 ms, issue 34).
#: None keeps every product on the calling thread.
THREADS_MIN_MACS: Optional[int] = 1 << 22

#: What runs when the kernel does not (small or non-float32 products): pytrain's
#: previous linalg backend when installed through install(), else numpy.
FALLBACK = np.matmul


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
    if (kernels is None or a.dtype != np.float32 or b.dtype != np.float32
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
    sgemm = _threaded("sgemm", m * n * k)
    if sgemm is kernels.sgemm:
        sgemm(la[0], lb[0], m, n, k, 1.0, ptr(a), la[1], ptr(b), lb[1], 0.0, ptr(c), n)
    else:  # the helper threads' sgemm: a read-only operand's copy is kept between calls
        sgemm(la[0], lb[0], m, n, k, 1.0, ptr(a), la[1], ptr(b), lb[1], 0.0, ptr(c), n, keep_token(a), keep_token(b))
    return c


#: keep tokens of read-only arrays: id of the array owning the memory -> (a weak reference to it, its token)
_KEPT: Dict[int, Tuple[weakref.ref, int]] = {}
_LAST_TOKEN = [0]


def keep_token(x: np.ndarray) -> int:
    """A number naming the read-only memory under ``x`` (a plan's constant, a frozen weight: neither it nor the
    array owning its memory writeable) for as long as that array lives, 0 for anything else: the helper
    threads keep their shared-memory copy of a product's operand under it instead of copying it on every
    call (web/kernels/threads-team.js copyKept). An array written after it was made read-only would be read stale:
    pytrain never does (the optimizer writes only the trainable parameters, which stay writeable)."""
    owner = x
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if x.flags.writeable or owner.flags.writeable:
        return 0
    hit = _KEPT.get(id(owner))
    if hit is not None and hit[0]() is owner:
        return hit[1]
    if len(_KEPT) >= 4096:  # forget the arrays that died (their ids may name new arrays)
        for key in [k for k, (ref, _) in _KEPT.items() if ref() is None]:
            del _KEPT[key]
    _LAST_TOKEN[0] += 1
    _KEPT[id(owner)] = (weakref.ref(owner), _LAST_TOKEN[0])
    return _LAST_TOKEN[0]


def _threaded(name: str, macs: int):
    """The page's kernel ``name`` (sgemm, sgemm_batched) for ``macs`` multiply-adds: its helper threads'
    form (``name``_threads) from THREADS_MIN_MACS on when the page started them, else the calling thread's."""
    return threaded(name, macs, THREADS_MIN_MACS)


def _batch_strides(x: np.ndarray) -> Optional[Tuple[int, ...]]:
    """The element strides of ``x``'s batch axes (all but the last two), None when one is not a whole float32."""
    st = x.strides[:-2]
    return None if any(v % 4 or v < 0 for v in st) else tuple(v // 4 for v in st)


def _folds(shape: Tuple[int, ...], strides: Tuple[int, ...]) -> bool:
    """Whether batch axes of ``shape`` with element ``strides`` are one stride apart (a reshape to one batch axis
    is then a view, not a copy); axes of one entry do not count."""
    axes = [(d, s) for d, s in zip(shape, strides) if d != 1]
    return all(s0 == s1 * d1 for (_, s0), (d1, s1) in zip(axes, axes[1:]))


def matmul_batched(a: np.ndarray, b: np.ndarray) -> Optional[np.ndarray]:
    """A stack of float32 products with equal batch shapes (..., m, k) @ (..., k, n) in one call
    (gemm_ops.c's loop over sgemm), for backend "matmul_batched"; None for other cases. Operands
    may be transposed views (MatMulGrad's swapaxes) as long as the batch axes fold into one stride, or, with
    two batch axes that do not (attention's heads split off a row: (batch, heads) views of (batch, tokens,
    heads * size)), one call per entry of the shorter axis, without copying either operand."""
    if a.dtype != np.float32 or b.dtype != np.float32 or a.shape[:-2] != b.shape[:-2]:
        return None
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    count = int(np.prod(a.shape[:-2]))
    if k != k2 or m == 0 or n == 0 or k == 0 or count == 0 or count * m * n * k < MIN_MACS:
        return None
    c = np.empty(a.shape[:-2] + (m, n), dtype=np.float32)
    # split by whole products across the helper threads from THREADS_MIN_MACS on (each product the
    # calling thread's bits)
    run = _threaded("sgemm_batched", count * m * n * k)
    batch = a.shape[:-2]
    if len(batch) == 2:
        sa, sb = _batch_strides(a), _batch_strides(b)
        if sa is not None and sb is not None and not (_folds(batch, sa) and _folds(batch, sb)):
            la, lb = _layout(a[0, 0]), _layout(b[0, 0])
            if la is not None and lb is not None:
                return _two_axes(run, a, b, c, (la, lb, sa, sb))
    a3 = a.reshape((count, m, k))  # a view when the batch axes fold (numpy copies otherwise)
    b3 = b.reshape((count, k, n))
    la, lb = _layout(a3[0]), _layout(b3[0])
    if la is None or lb is None or a3.strides[0] % 4 or b3.strides[0] % 4:
        return None
    run(count, la[0], lb[0], m, n, k, ptr(a3), a3.strides[0] // 4, la[1], ptr(b3), b3.strides[0] // 4, lb[1],
        ptr(c), m * n, n)
    return c


def _two_axes(run, a: np.ndarray, b: np.ndarray, c: np.ndarray, layout: tuple) -> np.ndarray:
    """matmul_batched's products over two batch axes that do not fold: one call per entry of the shorter axis,
    each a stack along the longer one at its strides."""
    la, lb, sa, sb = layout
    batch = a.shape[:-2]
    m, k = a.shape[-2:]
    n = b.shape[-1]
    inner = 1 if batch[1] >= batch[0] else 0   # the longer axis in each call, the other looped over
    outer = 1 - inner
    sc = (batch[1] * m * n, m * n)
    for i in range(batch[outer]):
        run(batch[inner], la[0], lb[0], m, n, k, ptr(a) + 4 * i * sa[outer], sa[inner], la[1],
            ptr(b) + 4 * i * sb[outer], sb[inner], lb[1], ptr(c) + 4 * i * sc[outer], sc[inner], n)
    return c


def gemm(ctx, A: np.ndarray, B: np.ndarray, C: Optional[np.ndarray] = None, *, alpha: float = 1.0,
         beta: float = 1.0, transA: int = 0, transB: int = 0) -> Optional[Tuple[np.ndarray]]:
    """ONNX Gemm with alpha = beta = 1 (what Linear layers export) in one call, product and bias
    (gemm_ops.c), for registry.accelerate; the numpy kernel takes small products and the rest."""
    if A.ndim != 2 or B.ndim != 2 or A.dtype != F32 or B.dtype != F32 or alpha != 1.0:
        return None
    a = A.T if transA else A
    b = B.T if transB else B
    m, k = a.shape
    k2, n = b.shape
    if k != k2 or m * n * k < MIN_MACS or k == 0:
        return None
    c_kind = 0
    if C is not None and beta != 0.0:
        if beta != 1.0 or C.dtype != F32 or not C.flags.c_contiguous:
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
    sgemm = _threaded("sgemm", m * n * k)
    if sgemm is not kernels.sgemm:  # the helper threads' sgemm: the bias first, then C = A @ B + C
        if c_kind:
            y[...] = C.reshape((n,)) if c_kind == 1 else C
        sgemm(la[0], lb[0], m, n, k, 1.0, ptr(a), la[1], ptr(b), lb[1], 1.0 if c_kind else 0.0, ptr(y), n,
              keep_token(a), keep_token(b))
        return (y,)
    kernels.gemm(la[0], lb[0], m, n, k, ptr(a), la[1], ptr(b), lb[1], ptr(C) if c_kind else 0, c_kind, ptr(y))
    return (y,)


def transpose(a: np.ndarray) -> Optional[np.ndarray]:
    """``a.T`` of a C-contiguous 2-D float32 array, as a new C-contiguous array (transpose.c)."""
    if a.ndim != 2 or not plain(a):
        return None
    rows, cols = a.shape
    out = np.empty((cols, rows), dtype=np.float32)
    kernels.transpose(ptr(a), ptr(out), rows, cols)
    return out
