"""The one place matrix products happen, so a faster backend (a WebAssembly SIMD GEMM in the
browser) can be swapped in for every kernel at once."""
from __future__ import annotations

import numpy as np


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy ``matmul`` semantics (batched, broadcasting, 1-D promotion)."""
    return np.matmul(a, b)
