"""Optimizer updates with torch.optim's exact arithmetic, applied in place on the state arrays
(parameters, moments) so a step allocates only temporaries. Like torch's foreach optimizers and
ORT's AdamWOptimizer, one node updates every parameter: its inputs after (lr, step) are one
group per parameter."""
from __future__ import annotations

import math
from typing import Any, List, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError
from pytrain.ops import backend
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


def _groups(op: str, ctx: OpContext, tensors: Sequence[Any], size: int, names: str) -> List[Sequence[Any]]:
    """Split an update node's inputs after (lr, step) into one group per parameter."""
    if not tensors or len(tensors) % size:
        raise GraphError("%s node %r: the inputs after lr and step must be groups of %d (%s), got %d"
                         % (op, ctx.node_name, size, names, len(tensors)))
    return [tensors[i:i + size] for i in range(0, len(tensors), size)]


@kernel("SGDStep", domain=PYTRAIN_DOMAIN, inplace=True)
def sgd_step(ctx: OpContext, lr: np.ndarray, step: np.ndarray, *tensors: np.ndarray, momentum: float = 0.0,
             dampening: float = 0.0, nesterov: int = 0, weight_decay: float = 0.0) -> Tuple[Any, ...]:
    """torch.optim.SGD for every (param, grad[, momentum_buf]) group (the buffer iff momentum):
    d = g + wd*p; buf = mu*buf + (1-dampening)*d (buf = d on the first step);
    d = d + mu*buf if nesterov else buf; p -= lr * d. Outputs: (param[, momentum_buf]) per group."""
    lr_, first = float(lr), int(step) <= 1
    size = 3 if momentum else 2
    out: List[Any] = []
    for group in _groups("SGDStep", ctx, tensors, size, "param, grad" + (", momentum_buf" if momentum else "")):
        param, grad = group[0], group[1]
        d = grad + weight_decay * param if weight_decay else grad
        if momentum:
            buf = group[2]
            if first:
                buf[...] = d
            else:
                buf *= momentum
                buf += (1.0 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        param -= lr_ * d
        out += group[:1] + group[2:]
    return tuple(out)


@kernel("AdamStep", domain=PYTRAIN_DOMAIN, inplace=True)
def adam_step(ctx: OpContext, lr: np.ndarray, step: np.ndarray, *tensors: np.ndarray, beta1: float = 0.9,
              beta2: float = 0.999, epsilon: float = 1e-8, weight_decay: float = 0.0, decoupled: int = 0,
              amsgrad: int = 0) -> Tuple[Any, ...]:
    """torch.optim.Adam (decoupled=0) / AdamW (decoupled=1) for every (param, grad, m, v) group:
    m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
    p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), with weight decay
    as L2 on g (Adam) or as p *= 1 - lr*wd before the update (AdamW). Outputs: (param, m, v) per group."""
    lr_, t = float(lr), int(step)
    groups = _groups("AdamStep", ctx, tensors, 4, "param, grad, m, v")
    fast_adam = backend.get("adam")  # the browser's one-pass wasm kernel, one call for every group
    if fast_adam is None or not fast_adam(
            groups, lr_, t, beta1, beta2, epsilon, weight_decay, decoupled):
        for param, grad, m, v in groups:
            _adam_update(param, grad, m, v, lr_, t, beta1, beta2, epsilon, weight_decay, decoupled)
    return tuple(x for param, _, m, v in groups for x in (param, m, v))


def update_moments(grad: np.ndarray, m: np.ndarray, v: np.ndarray, beta1: float, beta2: float) -> np.ndarray:
    """Adam's moments in place (m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g); returns the scratch buffer
    the update goes on with. One buffer, every pass in place: each array streams a few times only.
    The buffer is an array for a rank-0 parameter too (numpy makes a scalar of a 0-d product)."""
    tmp = np.multiply(grad, 1.0 - beta1, out=np.empty_like(grad))
    m *= beta1
    m += tmp
    np.multiply(grad, grad, out=tmp)
    tmp *= 1.0 - beta2
    v *= beta2
    v += tmp
    return tmp


def _adam_update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, t: int,
                 beta1: float, beta2: float, epsilon: float, weight_decay: float, decoupled: int) -> None:
    g = grad
    if weight_decay:
        if decoupled:
            param *= 1.0 - lr * weight_decay
        else:
            g = grad + weight_decay * param
    tmp = update_moments(g, m, v, beta1, beta2)
    np.sqrt(v, out=tmp)
    tmp *= 1.0 / math.sqrt(1.0 - beta2 ** t)
    tmp += epsilon
    np.divide(m, tmp, out=tmp)
    tmp *= lr / (1.0 - beta1 ** t)
    param -= tmp
