"""MaxPoolGrad: the gradient of MaxPool from the Indices output it produced."""
from __future__ import annotations

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("MaxPoolGrad", domain=PYTRAIN_DOMAIN)
def maxpool_grad(ctx: OpContext, dY: np.ndarray, Indices: np.ndarray, X: np.ndarray, *,
                 storage_order: int = 0) -> tuple:
    """dX = zeros like X with dY scatter-added at ``Indices``.

    Indices are flat positions in the whole of X (batch and channel offsets included), as
    onnxruntime's MaxPool returns them: spatial offsets row-major, or column-major when the
    MaxPool had storage_order 1; overlapping windows that pick the same element accumulate.
    """
    # intp: bincount refuses int64 indices on 32-bit builds (Pyodide is wasm32).
    idx = np.asarray(Indices).reshape(-1).astype(np.intp, copy=False)
    if idx.shape[0] != dY.size:
        raise KernelError("MaxPoolGrad node %r: Indices %s must have dY's shape %s"
                          % (ctx.node_name, np.shape(Indices), dY.shape))
    if idx.size and (idx.min() < 0 or idx.max() >= X.size):
        raise KernelError("MaxPoolGrad node %r: Indices must lie in [0, %d) for X of shape %s"
                          % (ctx.node_name, X.size, X.shape))
    if storage_order == 1 and X.ndim > 3:
        spatial = X.shape[2:]
        size = int(np.prod(spatial))
        coords = np.unravel_index(idx % size, spatial, order="F")
        idx = idx - idx % size + np.ravel_multi_index(coords, spatial).astype(np.intp, copy=False)
    # bincount sums in float64, which is also more accurate for float32 gradients.
    flat = np.bincount(idx, weights=dY.reshape(-1), minlength=X.size)
    return (flat.reshape(X.shape).astype(dY.dtype, copy=False),)
