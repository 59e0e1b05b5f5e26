"""The one place matrix products (and contiguous transposes) happen, so a faster backend (the
WebAssembly SIMD kernels in the browser) can be swapped in for every kernel at once."""
from __future__ import annotations

import sys
from typing import Callable, Optional

import numpy as np

Product = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: Pyodide 0.17's numpy has no BLAS; there ``einsum`` beats ``matmul`` (4.7 vs 7.7 ms/step measured)
IN_BROWSER = sys.platform == "emscripten" or "pyodide" in sys.modules


def _einsum_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,jk->ik", a, b)


_backend: Optional[Product] = _einsum_2d if IN_BROWSER else None


def set_backend(product: Optional[Product]) -> Optional[Product]:
    """Use ``product(a, b)`` for 2-D float32 products (None: numpy's own); returns the previous one."""
    global _backend
    previous, _backend = _backend, product
    return previous


def has_backend() -> bool:
    """Whether 2-D products go to a backend (the browser's wasm GEMM, numpy without BLAS) rather
    than numpy's BLAS matmul."""
    return _backend is not None


#: stacks of at most this many products go to the backend one product at a time
_MAX_STACK = 4


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy ``matmul`` semantics (batched, broadcasting, 1-D promotion)."""
    if a.ndim > 2 and b.ndim == 2:
        # a Linear layer over a sequence, (batch, tokens, k) @ (k, n): one product of all the rows, not
        # one per batch item (numpy loops over the batch; in the browser its batched matmul has no BLAS,
        # ~3 GFLOP/s against the wasm GEMM's ~40)
        out = matmul(a.reshape(-1, a.shape[-1]), b)
        return out.reshape(a.shape[:-1] + (b.shape[1],))
    if _backend is not None and a.dtype == np.float32 and b.dtype == np.float32:
        if a.ndim == 2 and b.ndim == 2:
            return _backend(a, b)
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0] <= _MAX_STACK:
            # convolutions: one product per group (usually one, which needs no stacking copy)
            if a.shape[0] == 1:
                return _backend(a[0], b[0])[None]
            return np.stack([_backend(a[i], b[i]) for i in range(a.shape[0])])
    if _batched_backend is not None and a.ndim > 2 and a.shape[:-2] == b.shape[:-2]:
        out = _batched_backend(a, b)  # a stack of products in one call (attention's heads)
        if out is not None:
            return out
    return np.matmul(a, b)


Batched = Callable[[np.ndarray, np.ndarray], Optional[np.ndarray]]
_batched_backend: Optional[Batched] = None


def set_batched_backend(product: Optional[Batched]) -> Optional[Batched]:
    """Use ``product(a, b)`` for stacks of products with equal batch shapes where it returns an
    array (None: numpy's own); returns the previous one."""
    global _batched_backend
    previous, _batched_backend = _batched_backend, product
    return previous


Transpose = Callable[[np.ndarray], Optional[np.ndarray]]
_transpose_backend: Optional[Transpose] = None


def set_transpose_backend(transpose: Optional[Transpose]) -> Optional[Transpose]:
    """Use ``transpose(a)`` for :func:`transposed` where it returns an array; returns the previous one."""
    global _transpose_backend
    previous, _transpose_backend = _transpose_backend, transpose
    return previous


def transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` of a 2-D array as a new C-contiguous array."""
    if _transpose_backend is not None:
        t = _transpose_backend(a)
        if t is not None:
            return t
    return np.ascontiguousarray(a.T)
