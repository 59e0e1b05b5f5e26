"""Accelerated implementations the numpy kernels ask for by name: the browser's WebAssembly
kernels (:func:`pytrain.ops.wasm.install`) put theirs here, and a kernel that finds one calls it
before its own numpy code. An implementation may decline a case by returning None (``adam``:
False), which leaves it to numpy. Whole-op replacements go through ``registry.accelerate``
instead; this registry is for the pieces inside kernels that several ops share.

Names and their contracts:

- ``matmul``: ``(a, b)`` -> the 2-D float32 product (:mod:`pytrain.ops.linalg`; Pyodide's numpy,
  which has no BLAS, starts with ``einsum``)
- ``matmul_batched``: ``(a, b)`` -> a stack of products with equal batch shapes, or None
- ``transpose``: ``(a)`` -> ``a.T`` of a 2-D array as a new C-contiguous array, or None
- ``columns`` / ``columns_adjoint``: ``(xt, win)`` / ``(dcols, win)`` -> im2col / col2im in the
  batch-last layout ``xt = (C, *padded, N)`` (:mod:`pytrain.ops.windows`), or None
- ``max_pool``: ``(xp, win, want_indices, storage_order)`` -> MaxPool's ``(y, indices)``, or None
- ``upsample``: ``(x, factors)`` -> ``x`` with each entry repeated ``factors[axis]`` times along every
  axis (Resize's nearest integer upsampling) as a new array, or None
- ``adam``: ``(groups, lr, step, beta1, beta2, epsilon, weight_decay, decoupled)`` -> True when it
  updated every (param, grad, m, v) group in place
- ``finite``: ``(arrays)`` -> the index of the first array holding a NaN or an infinity, -1, or None
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

NAMES = ("matmul", "matmul_batched", "transpose", "columns", "columns_adjoint", "max_pool", "upsample", "adam", "finite")

_impls: Dict[str, Callable[..., Any]] = {}


def get(name: str) -> Optional[Callable[..., Any]]:
    """The implementation installed for ``name``, or None (the kernel's numpy code)."""
    return _impls.get(name)


def use(name: str, fn: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    """Install ``fn`` for ``name`` (None: back to numpy); returns the previous one, so a caller can
    put it back."""
    if name not in NAMES:
        raise ValueError("no accelerated implementation is called %r; the names are %s" % (name, ", ".join(NAMES)))
    previous = _impls.pop(name, None)
    if fn is not None:
        _impls[name] = fn
    return previous
