"""LogSoftmaxGrad: the gradient of LogSoftmax, read from its output."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("LogSoftmaxGrad", domain=PYTRAIN_DOMAIN)
def logsoftmax_grad(ctx: OpContext, dY: np.ndarray, Y: np.ndarray, *, axis: int = -1) -> tuple:
    """dX = dY - exp(Y) * sum(dY, axis, keepdims)."""
    return (dY - np.exp(Y) * np.sum(dY, axis=axis, keepdims=True),)
