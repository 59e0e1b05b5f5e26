"""The one place matrix products happen, so a faster backend (the WebAssembly SIMD GEMM in the
browser) can be swapped in for every kernel at once."""
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


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy ``matmul`` semantics (batched, broadcasting, 1-D promotion)."""
    if _backend is not None and a.ndim == 2 and b.ndim == 2 and a.dtype == np.float32 and b.dtype == np.float32:
        return _backend(a, b)
    return np.matmul(a, b)
