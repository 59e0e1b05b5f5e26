"""NegativeLogLikelihoodLossGrad: the gradient of ONNX NegativeLogLikelihoodLoss w.r.t. its input."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.op_softmax_cross_entropy_loss_grad import sample_coefficients


@kernel("NegativeLogLikelihoodLossGrad", domain=PYTRAIN_DOMAIN)
def nll_loss_grad(ctx: OpContext, dLoss: np.ndarray, input: np.ndarray, target: np.ndarray,
                  weight: Optional[np.ndarray] = None, *, reduction: str = "mean",
                  ignore_index: Optional[int] = None) -> tuple:
    """dInput = -coef at each sample's target class, zero elsewhere (loss = -input[n, target[n]] * w)."""
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    labels = np.asarray(target).astype(np.int64, copy=False)
    safe, coef = sample_coefficients(ctx, "NegativeLogLikelihoodLossGrad", dLoss, labels, weight,
                                     input.shape[1], input.dtype, reduction, ignore_index)
    grad = np.zeros(input.shape, input.dtype)
    np.put_along_axis(grad, np.expand_dims(safe, 1), np.expand_dims(-coef, 1).astype(input.dtype), axis=1)
    return (grad,)
