"""Finite-difference gradients, the oracle for every gradient test (kernels and whole graphs)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from pytrain.ops import PYTRAIN_DOMAIN, OpContext, get_kernel


def numeric_grad(f: Callable[..., float], inputs: Sequence[np.ndarray], wrt: int,
                 eps: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of the scalar ``f(*inputs)`` w.r.t. ``inputs[wrt]``.

    ``f`` is called as ``f(*inputs)`` and must return something ``float()`` accepts. Inputs are
    copied (``f`` never sees the caller's arrays); ``inputs[wrt]`` should be float64, since eps=1e-6
    is far below float32 resolution. The result has ``inputs[wrt]``'s shape, in float64.
    """
    xs = [np.array(x, copy=True) for x in inputs]
    x = xs[wrt]
    if x.dtype != np.float64:
        raise TypeError("numeric_grad: input %d is %s; finite differences need float64" % (wrt, x.dtype))
    flat = x.reshape(-1)  # a view: x is a fresh contiguous copy
    grad = np.zeros(flat.shape, dtype=np.float64)
    for i in range(flat.size):
        orig = flat[i]
        flat[i] = orig + eps
        up = float(f(*xs))
        flat[i] = orig - eps
        down = float(f(*xs))
        flat[i] = orig
        grad[i] = (up - down) / (2.0 * eps)
    return grad.reshape(x.shape)


def run_kernel(op_type: str, *inputs: Optional[np.ndarray], domain: str = PYTRAIN_DOMAIN,
               wants: Optional[Sequence[bool]] = None, **attrs) -> tuple:
    """Call the registered kernel of ``op_type`` directly; every output is wanted unless ``wants``
    says otherwise."""
    info = get_kernel(op_type, domain)
    assert info is not None, "no kernel for %s in domain %r" % (op_type, domain)
    mask = tuple(wants) if wants is not None else (True,) * 16
    ctx = OpContext(training=True, node_name="test_" + op_type, output_mask=mask)
    return info.fn(ctx, *inputs, **attrs)
