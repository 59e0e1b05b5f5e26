"""The optimizer step's kernels (optim.c): the one-pass Adam/AdamW update of every parameter and
the finite-gradient guard before it.
"""
from __future__ import annotations

import math
import weakref
from typing import List, Optional

import numpy as np

from pytrain.ops.wasm import F32, THREADS_MIN_ELEMENTS, ptr, kernels, threaded


class _LastTable:
    """The (n, p, g, m, v) table adam() built last, with weak references to its arrays: an optimizer
    passes the same parameter, gradient and moment arrays every step, and reading a numpy data pointer
    costs ~2 us in Pyodide (16 a step for a two-layer MLP). A numpy array keeps its buffer for its
    lifetime, so the same objects have the same pointers."""

    def __init__(self) -> None:
        self.refs: List[weakref.ref] = []
        self.table: List[int] = []
        self.total = 0

    def matches(self, arrays: List[np.ndarray]) -> bool:
        if len(arrays) != len(self.refs):
            return False
        for r, a in zip(self.refs, arrays):   # (a plain loop: a generator costs ~8 us in Pyodide)
            if r() is not a:
                return False
        return True


_last = _LastTable()


def adam(groups, lr: float, step: int, beta1: float, beta2: float, epsilon: float, weight_decay: float,
         decoupled: int) -> bool:
    """One Adam/AdamW update of every (param, grad, m, v) group in place, one pass each and one call
    for all (web/kernels/optim.c); False when any array is not contiguous float32 of its
    parameter's size, leaving the update to numpy."""
    if kernels is None:
        return False
    arrays = [a for group in groups for a in group]
    if not _last.matches(arrays):
        table = []
        total = 0
        for group in groups:
            n = group[0].size
            for a in group:
                if a.dtype != np.float32 or not a.flags.c_contiguous or a.size != n:
                    return False
            table += [n] + [ptr(a) for a in group]
            total += n
        _last.refs, _last.table, _last.total = [weakref.ref(a) for a in arrays], table, total
    table = np.array(_last.table, dtype=np.int32)   # (the helper threads' form rewrites it: scratch)
    # the same float32 constants the numpy path multiplies by (op_optimizers._adam_update)
    update = threaded("adam", _last.total, THREADS_MIN_ELEMENTS["adam"])
    update(ptr(table), len(groups), 1.0 - beta1, beta1, 1.0 - beta2, beta2,
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
        elif v.dtype != F32 or not v.flags.c_contiguous:
            return None
        else:
            table += [v.size, ptr(v) if v.size else 0]
    if not table:
        return -1
    t = np.array(table, dtype=np.int32)
    return int(kernels.first_non_finite(ptr(t), len(table) // 2))
