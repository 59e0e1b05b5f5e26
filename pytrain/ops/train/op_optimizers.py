"""Optimizer updates with torch.optim's exact arithmetic, applied in place on the state arrays
(parameters, moments) so a step allocates only temporaries."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Tuple

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("ClipGradNorm", domain=PYTRAIN_DOMAIN, inplace=True)
def clip_grad_norm(ctx: OpContext, *grads: np.ndarray, max_norm: float = 1.0) -> Tuple[Any, ...]:
    """torch.nn.utils.clip_grad_norm_: scale every gradient by min(1, max_norm / (norm + 1e-6))."""
    total = math.sqrt(sum(float(np.dot(g.ravel(), g.ravel())) for g in grads))
    coef = min(1.0, max_norm / (total + 1e-6))
    if coef < 1.0:
        for g in grads:
            g *= coef
    return grads


@kernel("SGDStep", domain=PYTRAIN_DOMAIN, inplace=True)
def sgd_step(ctx: OpContext, lr: np.ndarray, step: np.ndarray, param: np.ndarray, grad: np.ndarray,
             momentum_buf: Any = None, *, momentum: float = 0.0, dampening: float = 0.0,
             nesterov: int = 0, weight_decay: float = 0.0) -> Tuple[Any, ...]:
    """torch.optim.SGD: d = g + wd*p; buf = mu*buf + (1-dampening)*d (buf = d on the first step);
    d = d + mu*buf if nesterov else buf; p -= lr * d."""
    lr_ = float(lr)
    d = grad + weight_decay * param if weight_decay else grad
    if momentum:
        if int(step) <= 1:
            momentum_buf[...] = d
        else:
            momentum_buf *= momentum
            momentum_buf += (1.0 - dampening) * d
        d = d + momentum * momentum_buf if nesterov else momentum_buf
    param -= lr_ * d
    return (param, momentum_buf)


AdamBackend = Callable[..., bool]
_adam_backend: Optional[AdamBackend] = None


def set_adam_backend(backend: Optional[AdamBackend]) -> Optional[AdamBackend]:
    """Use ``backend(param, grad, m, v, lr, step, beta1, beta2, epsilon, weight_decay, decoupled)``
    for Adam updates when it returns True (the browser's one-pass wasm kernel); returns the previous."""
    global _adam_backend
    previous, _adam_backend = _adam_backend, backend
    return previous


@kernel("AdamStep", domain=PYTRAIN_DOMAIN, inplace=True)
def adam_step(ctx: OpContext, lr: np.ndarray, step: np.ndarray, param: np.ndarray, grad: np.ndarray,
              m: np.ndarray, v: np.ndarray, *, beta1: float = 0.9, beta2: float = 0.999,
              epsilon: float = 1e-8, weight_decay: float = 0.0, decoupled: int = 0,
              amsgrad: int = 0) -> Tuple[Any, ...]:
    """torch.optim.Adam (decoupled=0) / AdamW (decoupled=1):
    m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
    p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), with weight decay
    as L2 on g (Adam) or as p *= 1 - lr*wd before the update (AdamW)."""
    lr_, t = float(lr), int(step)
    if _adam_backend is not None and _adam_backend(
            param, grad, m, v, lr_, t, beta1, beta2, epsilon, weight_decay, decoupled):
        return (param, m, v)
    g = grad
    if weight_decay:
        if decoupled:
            param *= 1.0 - lr_ * weight_decay
        else:
            g = grad + weight_decay * param
    # one scratch buffer, every pass in place: the update streams each array a few times only
    tmp = np.multiply(g, 1.0 - beta1)
    m *= beta1
    m += tmp
    np.multiply(g, g, out=tmp)
    tmp *= 1.0 - beta2
    v *= beta2
    v += tmp
    np.sqrt(v, out=tmp)
    tmp *= 1.0 / math.sqrt(1.0 - beta2 ** t)
    tmp += epsilon
    np.divide(m, tmp, out=tmp)
    tmp *= lr_ / (1.0 - beta1 ** t)
    param -= tmp
    return (param, m, v)
