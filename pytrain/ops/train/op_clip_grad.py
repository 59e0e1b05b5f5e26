"""ClipGrad: the gradient of Clip."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("ClipGrad", domain=PYTRAIN_DOMAIN)
def clip_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, lo: Optional[np.ndarray] = None,
              hi: Optional[np.ndarray] = None) -> tuple:
    """dX = dY where min <= X <= max else 0 (bounds inclusive, as torch.clamp's backward).

    ``lo``/``hi`` are Clip's optional ``min``/``max`` inputs (None when absent).
    """
    keep = np.ones(X.shape, dtype=bool)
    if lo is not None:
        keep &= X >= lo
    if hi is not None:
        keep &= X <= hi
    return (np.where(keep, dY, np.zeros((), dY.dtype)),)
