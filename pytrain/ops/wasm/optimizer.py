"""The optimizer step's kernels (optim.c): the one-pass Adam/AdamW update of every parameter and
the finite-gradient guard before it.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from pytrain.ops.wasm import _F32, THREADS_MIN_ELEMENTS, _ptr, _wasm, threaded


def adam(groups, lr: float, step: int, beta1: float, beta2: float, epsilon: float, weight_decay: float,
         decoupled: int) -> bool:
    """One Adam/AdamW update of every (param, grad, m, v) group in place, one pass each and one call
    for all (web/kernels/optim.c); False when any array is not contiguous float32 of its
    parameter's size, leaving the update to numpy."""
    if _wasm is None:
        return False
    table = []
    total = 0
    for group in groups:
        n = group[0].size
        for a in group:
            if a.dtype != np.float32 or not a.flags.c_contiguous or a.size != n:
                return False
        table += [n] + [_ptr(a) for a in group]
        total += n
    table = np.array(table, dtype=np.int32)   # (the helper threads' form rewrites it: scratch)
    # the same float32 constants the numpy path multiplies by (op_optimizers._adam_update)
    update = threaded("adam", total, THREADS_MIN_ELEMENTS["adam"])
    update(_ptr(table), len(groups), 1.0 - beta1, beta1, 1.0 - beta2, beta2,
           1.0 / math.sqrt(1.0 - beta2 ** step), epsilon, lr / (1.0 - beta1 ** step), weight_decay,
           int(decoupled), 1.0 - lr * weight_decay)
    return True


def first_non_finite(values) -> Optional[int]:
    """pytrain.module.first_non_finite in one call for every array (optim.c): the index of the
    first float array holding a NaN or an infinity, or -1; None (numpy decides) unless every float
    array is C-contiguous float32. Integer arrays are never non-finite."""
    table = []
    for v in values:
        if v.dtype.kind != "f":
            table += [0, 0]
        elif v.dtype != _F32 or not v.flags.c_contiguous:
            return None
        else:
            table += [v.size, _ptr(v) if v.size else 0]
    if not table:
        return -1
    t = np.array(table, dtype=np.int32)
    return int(_wasm.first_non_finite(_ptr(t), len(table) // 2))
