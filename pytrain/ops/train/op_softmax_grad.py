"""SoftmaxGrad: the gradient of Softmax, read from its output."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("SoftmaxGrad", domain=PYTRAIN_DOMAIN)
def softmax_grad(ctx: OpContext, dY: np.ndarray, Y: np.ndarray, *, axis: int = -1) -> tuple:
    """dX = Y * (dY - sum(dY * Y, axis, keepdims))."""
    return (Y * (dY - np.sum(dY * Y, axis=axis, keepdims=True)),)
