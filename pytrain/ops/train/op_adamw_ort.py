"""ONNX Runtime 1.19's AdamW update (``com.microsoft:AdamWOptimizer``'s arithmetic), for
``pytrain.ort``'s optimizer models: one node updates every (param, grad, m, v) group in place.

adam_mode 0 is PyTorch's AdamW (decay ``p -= lr*wd*p`` first, then
``p -= lr * m / (bc1 * (sqrt(v / bc2) + eps))``); adam_mode 1 is Hugging Face's (ORT's default):
``p -= lr*sqrt(bc2)/bc1 * m / (sqrt(v) + eps)``, then ``p -= lr*wd*p``. ``bc1 = 1 - alpha^t`` and
``bc2 = 1 - beta^t`` when ``correct_bias``, else 1. ORT's attribute names: alpha is beta1, beta is beta2.
"""
from __future__ import annotations

import math
from typing import Any, List, Tuple

import numpy as np

from pytrain.errors import GraphError
from pytrain.ops import backend
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train.op_optimizers import update_moments


def _corrections(alpha: float, beta: float, step: int, correct_bias: int) -> Tuple[float, float]:
    if not correct_bias:
        return 1.0, 1.0
    # as ORT: the betas are float32 attributes, each correction rounded to float32
    bc1 = float(np.float32(1.0 - float(np.float32(alpha)) ** step))
    bc2 = float(np.float32(1.0 - float(np.float32(beta)) ** step))
    return bc1, bc2


@kernel("OrtAdamWStep", domain=PYTRAIN_DOMAIN, inplace=True)
def ort_adamw_step(ctx: OpContext, lr: np.ndarray, step: np.ndarray, *tensors: np.ndarray, alpha: float = 0.9,
                   beta: float = 0.999, epsilon: float = 1e-8, weight_decay: float = 0.0, adam_mode: int = 0,
                   correct_bias: int = 1) -> Tuple[Any, ...]:
    """ORT's AdamWOptimizer for every (param, grad, m, v) group. Outputs: (param, m, v) per group."""
    if adam_mode not in (0, 1):
        raise GraphError("OrtAdamWStep node %r: adam_mode %r is not ORT's 0 (PyTorch) or 1 (Hugging Face)"
                         % (ctx.node_name, adam_mode))
    if adam_mode == 0 and not correct_bias:
        raise GraphError("OrtAdamWStep node %r: adam_mode 0 needs correct_bias 1, as ORT's AdamWOptimizer"
                         % ctx.node_name)
    if not tensors or len(tensors) % 4:
        raise GraphError("OrtAdamWStep node %r: the inputs after lr and step must be groups of 4 (param, grad, m, "
                         "v), got %d" % (ctx.node_name, len(tensors)))
    groups: List[Any] = [tensors[i:i + 4] for i in range(0, len(tensors), 4)]
    lr_, t = float(lr), int(step)
    bc1, bc2 = _corrections(alpha, beta, t, correct_bias)
    if not _fast(groups, lr_, t, alpha, beta, epsilon, weight_decay, adam_mode, correct_bias, bc2):
        for param, grad, m, v in groups:
            _update(param, grad, m, v, lr_, alpha, beta, epsilon, weight_decay, adam_mode, bc1, bc2)
    return tuple(x for param, _, m, v in groups for x in (param, m, v))


def _fast(groups: List[Any], lr: float, t: int, alpha: float, beta: float, epsilon: float, weight_decay: float,
          adam_mode: int, correct_bias: int, bc2: float) -> bool:
    """The browser's one-pass Adam kernel (PyTorch's rule) where it computes ORT's: mode 0 is PyTorch's;
    mode 1 with bias correction is PyTorch's update with eps / sqrt(bc2), decay applied after."""
    fast_adam = backend.get("adam")
    if fast_adam is None or not correct_bias:
        return False
    if adam_mode == 0:
        return bool(fast_adam(groups, lr, t, alpha, beta, epsilon, weight_decay, 1))
    if not fast_adam(groups, lr, t, alpha, beta, epsilon / math.sqrt(bc2), 0.0, 1):
        return False
    if weight_decay:
        for param, _, _, _ in groups:
            param *= 1.0 - lr * weight_decay
    return True


def _update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, alpha: float,
            beta: float, epsilon: float, weight_decay: float, adam_mode: int, bc1: float, bc2: float) -> None:
    if adam_mode == 0 and weight_decay:
        param -= param * (lr * weight_decay)
    tmp = update_moments(grad, m, v, alpha, beta)
    if adam_mode == 0:
        np.divide(v, bc2, out=tmp)
        np.sqrt(tmp, out=tmp)
        tmp += epsilon
        tmp *= bc1
        np.divide(m, tmp, out=tmp)
        tmp *= lr
    else:
        lr_corrected = lr * math.sqrt(bc2) / bc1
        np.sqrt(v, out=tmp)
        tmp += epsilon
        np.divide(m, tmp, out=tmp)
        tmp *= lr_corrected
    param -= tmp
    if adam_mode == 1 and weight_decay:
        param -= param * (lr * weight_decay)
