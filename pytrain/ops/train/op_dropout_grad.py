"""DropoutGrad: the gradient of Dropout given the mask it drew."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("DropoutGrad", domain=PYTRAIN_DOMAIN)
def dropout_grad(ctx: OpContext, dY: np.ndarray, mask: np.ndarray,
                 ratio: Optional[np.ndarray] = None) -> tuple:
    """dX = dY * mask / (1 - ratio); ratio defaults to 0.5 as in ONNX Dropout."""
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if r == 0.0:
        return (dY,)
    if r >= 1.0:
        # Everything was dropped (torch returns zeros too), and 1/(1-r) would be inf.
        return (np.zeros_like(dY),)
    return (np.where(mask, dY * (1.0 / (1.0 - r)), np.zeros((), dY.dtype)),)
