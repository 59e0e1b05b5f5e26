"""MatMulGrad: gradients of numpy/ONNX MatMul, including 1-D operands and batch broadcasting."""
from __future__ import annotations

import numpy as np

from pytrain.ops import linalg
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import sum_to_shape


def _t(m: np.ndarray) -> np.ndarray:
    return np.swapaxes(m, -1, -2)


@kernel("MatMulGrad", domain=PYTRAIN_DOMAIN)
def matmul_grad(ctx: OpContext, dY: np.ndarray, A: np.ndarray, B: np.ndarray) -> tuple:
    """dA = dY @ B^T and dB = A^T @ dY, each summed back to its operand's shape."""
    # Promote 1-D operands to matrices the way matmul does, so one formula covers every case.
    a = A[np.newaxis, :] if A.ndim == 1 else A
    b = B[:, np.newaxis] if B.ndim == 1 else B
    g = dY
    if B.ndim == 1:  # first, so a 0-d dY (vector . vector) becomes (1,) and then (1, 1)
        g = np.expand_dims(g, -1)
    if A.ndim == 1:
        g = np.expand_dims(g, -2)

    dA = dB = None
    if ctx.wants(0):
        if a.ndim == 2 and b.ndim > 2:
            # A (m,k) shared by a batch of B: fold the batch into one product instead of summing.
            gb = np.moveaxis(g, -2, 0).reshape(g.shape[-2], -1)  # (m, batch*n)
            bb = np.moveaxis(b, -2, 0).reshape(b.shape[-2], -1)  # (k, batch*n)
            dA = linalg.matmul(gb, bb.T)
        else:
            dA = sum_to_shape(linalg.matmul(g, _t(b)), a.shape)
        dA = dA.reshape(A.shape)
    if ctx.wants(1):
        if b.ndim == 2 and a.ndim > 2:
            # The common Linear case (batch, m, k) @ (k, n): one big product, no batch of partials.
            k = a.shape[-1]
            dB = linalg.matmul(a.reshape(-1, k).T, g.reshape(-1, g.shape[-1]))
        else:
            dB = sum_to_shape(linalg.matmul(_t(a), g), b.shape)
        dB = dB.reshape(B.shape)
    return (dA, dB)
