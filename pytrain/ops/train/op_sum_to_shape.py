"""SumToShape: the gradient of numpy broadcasting."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import sum_to_shape


@kernel("SumToShape", domain=PYTRAIN_DOMAIN)
def sum_to_shape_kernel(ctx: OpContext, dY: np.ndarray, X: np.ndarray) -> tuple:
    """dX: ``dY`` summed over the axes ``X`` was broadcast along, shaped like ``X``."""
    return (sum_to_shape(dY, X.shape),)
