"""The one place matrix products (and contiguous transposes) happen, so a faster implementation
(the WebAssembly SIMD kernels in the browser, installed in :mod:`pytrain.ops.backend` as
``matmul``, ``matmul_batched`` and ``transpose``) serves every kernel at once."""
from __future__ import annotations

import sys
from typing import Callable, Optional

import numpy as np

from pytrain.ops import backend

Product = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: Pyodide 0.17's numpy has no BLAS; there ``einsum`` beats ``matmul`` (4.7 vs 7.7 ms/step measured)
IN_BROWSER = sys.platform == "emscripten" or "pyodide" in sys.modules


def _einsum_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,jk->ik", a, b)


#: the ``matmul`` implementation before any is installed (None: numpy's BLAS matmul)
DEFAULT_PRODUCT: Optional[Product] = _einsum_2d if IN_BROWSER else None
if DEFAULT_PRODUCT is not None and backend.get("matmul") is None:
    backend.use("matmul", DEFAULT_PRODUCT)


def has_backend() -> bool:
    """Whether 2-D products go to an installed implementation (the browser's wasm GEMM, numpy
    without BLAS) rather than numpy's BLAS matmul."""
    return backend.get("matmul") is not None


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
    product = backend.get("matmul")
    if product is not None and a.dtype == np.float32 and b.dtype == np.float32:
        if a.ndim == 2 and b.ndim == 2:
            return product(a, b)
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0] <= _MAX_STACK:
            # convolutions: one product per group (usually one, which needs no stacking copy)
            if a.shape[0] == 1:
                return product(a[0], b[0])[None]
            return np.stack([product(a[i], b[i]) for i in range(a.shape[0])])
    batched = backend.get("matmul_batched")
    if batched is not None and a.ndim > 2 and a.shape[:-2] == b.shape[:-2]:
        out = batched(a, b)  # a stack of products in one call (attention's heads)
        if out is not None:
            return out
    return np.matmul(a, b)


def transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` of a 2-D array as a new C-contiguous array."""
    transpose = backend.get("transpose")
    if transpose is not None:
        t = transpose(a)
        if t is not None:
            return t
    return np.ascontiguousarray(a.T)
