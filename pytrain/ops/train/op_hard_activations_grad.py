"""HardSigmoidGrad and HardSwishGrad: the gradients of MobileNetV3's activations as one node each
(the same formulas as the graph of Div/Add/Clip/Greater/Less/And/Where nodes they replace: about
ten nodes and ten passes per activation in a training step, now one node)."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


def _inside(z: np.ndarray) -> np.ndarray:
    """0 < z < 1: the linear part (the gradient is 0 on both flat parts and, as torch, at the corners)."""
    inside = np.greater(z, 0)
    inside &= np.less(z, 1)
    return inside


@kernel("HardSigmoidGrad", domain=PYTRAIN_DOMAIN)
def hard_sigmoid_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, *, alpha: float = 0.2,
                      beta: float = 0.5) -> tuple:
    """dX = alpha * dY where 0 < alpha * X + beta < 1, else 0 (NaN X: 0)."""
    t = X.dtype.type
    z = np.multiply(X, t(alpha))
    z += t(beta)
    dx = np.zeros(np.broadcast(dY, X).shape, dtype=np.result_type(dY, X))
    np.multiply(dY, t(alpha), out=dx, where=_inside(z))
    return (dx,)


@kernel("HardSwishGrad", domain=PYTRAIN_DOMAIN)
def hard_swish_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray) -> tuple:
    """dX = dY * (h + X/6 where -3 < X < 3, else h), h = clip(X/6 + 1/2, 0, 1) (NaN X: NaN)."""
    t = X.dtype.type
    sixth = np.divide(X, t(6))
    z = sixth + t(0.5)
    slope = np.asarray(np.clip(z, t(0), t(1)))   # (an array also for a 0-d X: written in place below)
    np.add(slope, sixth, out=slope, where=_inside(z))
    slope *= dY
    return (slope,)
