"""The browser's matrix products: the WebAssembly SIMD GEMM (web/kernels/gemm.c) working in
place on numpy's buffers inside Pyodide's heap.

The page links gemm.wasm into Pyodide and registers it as the module ``pytrain_wasm_gemm``
(``sgemm`` + ``work_bytes``; see web/kernels/gemm.js). :func:`install` then routes every 2-D
float32 product of pytrain.ops.linalg through it; small products stay on numpy, where the
Python -> JS -> wasm call would cost more than it saves.
"""
from __future__ import annotations

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


def install() -> bool:
    """Route pytrain's 2-D float32 products through the kernel (pytrain.ops.linalg.set_backend)."""
    global FALLBACK
    if _wasm is None:
        return False
    from pytrain.ops import linalg

    previous = linalg.set_backend(matmul2d)
    if previous is not None and previous is not matmul2d:
        FALLBACK = previous
    return True
