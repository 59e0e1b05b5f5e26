"""HardSigmoid and HardSwish: the piecewise-linear activations of MobileNetV3.

ONNX's HardSigmoid defaults to alpha=0.2 (Keras' choice); torch.nn.Hardsigmoid is alpha=1/6,
beta=0.5, which is what torch exports as an attribute and what HardSwish uses (it has no attributes).
"""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


def hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """max(0, min(1, alpha * x + beta)) in x's dtype."""
    t = x.dtype.type
    y = np.asarray(x * t(alpha), dtype=x.dtype)
    y += t(beta)
    np.clip(y, t(0), t(1), out=y)
    return y


@kernel("HardSigmoid")
def hardsigmoid(ctx, X, *, alpha=0.2, beta=0.5):
    return (hard_sigmoid(X, alpha, beta),)


@kernel("HardSwish")
def hardswish(ctx, X):
    # y = x * HardSigmoid(x) with alpha = 1/6, beta = 0.5 (torch: x * relu6(x + 3) / 6);
    # -inf * 0 is NaN, as in onnxruntime and onnx's reference
    with np.errstate(invalid="ignore"):
        return (np.asarray(X * hard_sigmoid(X, 1.0 / 6.0, 0.5), dtype=X.dtype),)
