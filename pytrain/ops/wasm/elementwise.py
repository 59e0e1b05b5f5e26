"""Element-wise kernels on the wasm side (elementwise.c, exp_erf.c): Relu and its gradient, Clip,
Exp/Erf/Tanh, Pow by 2 or 3, Add/Sub/Mul/Div with a scalar or trailing-axes broadcast, and SumToShape's bias case.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from pytrain.ops.wasm import F32, THREADS_MIN_ELEMENTS, plain, ptr, kernels, threaded


def relu(ctx, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """Relu (elementwise.c), for registry.accelerate."""
    if not plain(X):
        return None
    y = np.empty_like(X)
    kernels.relu(ptr(X), ptr(y), X.size)
    return (y,)


def relu_grad(ctx, dY: np.ndarray, Y: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """ReluGrad (elementwise.c), for registry.accelerate."""
    if not plain(dY, Y):
        return None
    dx = np.empty_like(dY)
    kernels.relu_grad(ptr(dY), ptr(Y), ptr(dx), dY.size)
    return (dx,)


#: Below this many elements numpy's own binary ufunc is as quick as the checks and the call
MIN_BINARY_ELEMENTS = 4096


def binary(op: int):
    """Add/Sub/Mul/Div (op 0-3) of float32 tensors (elementwise.c) for registry.accelerate: a scalar
    operand, a trailing-axes broadcast (a bias row) or a leading-axes one (a value per row:
    squeeze-and-excite's channel scale) on either side, and equal shapes for Div, the
    result of the larger operand's shape. Measured in Chromium (Pyodide 0.17, BERT's 32x32x512):
    numpy's broadcasting loops and its division are 3-8x slower than the kernel, its same-shape
    add and multiply are not (0.16 ms against 0.24 for 524k products), so those stay with numpy,
    as do other broadcasts."""
    def run(ctx, A: np.ndarray, B: np.ndarray) -> Optional[Tuple[np.ndarray]]:
        if A.dtype != F32 or B.dtype != F32 or not A.flags.c_contiguous or not B.flags.c_contiguous:
            return None
        big, small, swap = (B, A, 1) if A.size < B.size else (A, B, 0)
        n, k = big.size, small.size
        if n < MIN_BINARY_ELEMENTS or small.ndim > big.ndim:
            return None  # (a size-1 operand with more axes would widen the output's shape)
        if k == n:
            if op != 3 or A.shape != B.shape:
                return None
        elif k != 1 and tuple(small.shape) != tuple(big.shape[big.ndim - small.ndim:]):
            if not leading_broadcast(big.shape, small.shape) or getattr(kernels, "binary_rows", None) is None:
                return None
            y = np.empty(big.shape, dtype=np.float32)  # one value per row: (N, C, H, W) with (N, C, 1, 1)
            kernels.binary_rows(op, ptr(big), ptr(small), ptr(y), k, n // k, swap)
            return (y,)
        y = np.empty(big.shape, dtype=np.float32)
        kernels.binary(op, ptr(big), ptr(small), ptr(y), n, k, swap)
        return (y,)
    return run


def leading_broadcast(big: tuple, small: tuple) -> bool:
    """Whether ``small`` is ``big``'s leading axes followed by ones, of the same rank (squeeze-and-excite's
    (N, C, 1, 1) scale of an (N, C, H, W) map): one value per row of ``big``."""
    if len(small) != len(big):
        return False
    j = len(small)
    while j and small[j - 1] == 1:
        j -= 1
    return 0 < j < len(big) and tuple(small[:j]) == tuple(big[:j])


def sum_to_shape(ctx, dY: np.ndarray, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """SumToShape's commonest case, a bias gradient: dY summed over its leading axes into X's
    trailing shape ((N, C) into (C,) or (1, C); a transformer's (B, T, C) into (C,)) by
    elementwise.c, adding the rows in order as numpy reduces leading axes, so the same bits; for
    registry.accelerate."""
    shape = tuple(X.shape)
    tail = shape
    while tail and tail[0] == 1:
        tail = tail[1:]
    lead = dY.ndim - len(tail)
    if (lead < 1 or tuple(dY.shape[lead:]) != tail or len(shape) > dY.ndim
            or not plain(dY, min_size=1)):
        return None
    cols = 1
    for d in tail:
        cols *= d
    rows = dY.size // cols if cols else 0
    if rows < 2:
        return None
    out = np.empty(shape, dtype=np.float32)
    kernels.sum_rows(ptr(dY), ptr(out), rows, cols)
    return (out,)


def scalar_bound(v: Optional[np.ndarray], dtype, default: float) -> Optional[float]:
    """Clip's optional min/max input as the float the kernel compares with (None: not a scalar)."""
    if v is None:
        return default
    v = np.asarray(v)
    if v.size != 1:
        return None
    return float(v.reshape(()).astype(dtype))


def clip(ctx, input: np.ndarray, min: Optional[np.ndarray] = None,
         max: Optional[np.ndarray] = None, **legacy) -> Optional[Tuple[np.ndarray]]:
    """Clip of a float32 tensor with scalar bounds in one pass (elementwise.c), for registry.accelerate
    (bounds as inputs or as Clip-6's float attributes; other attributes go to the numpy kernel)."""
    if not plain(input) or legacy:
        return None
    lo = scalar_bound(min, np.float32, -math.inf)
    hi = scalar_bound(max, np.float32, math.inf)
    if lo is None or hi is None:
        return None  # the numpy kernel names the bad bound
    y = np.empty_like(input)
    kernels.clip(ptr(input), ptr(y), input.size, lo, hi)
    return (y,)


def power(ctx, X: np.ndarray, Y: np.ndarray, **legacy: object) -> Optional[Tuple[np.ndarray]]:
    """Pow of a float32 tensor by a scalar exponent 2 or 3 as products, for registry.accelerate: the
    tanh form of GELU (GPT-2's) raises x to 3 and its gradient x to 2, and Pyodide's numpy takes
    ~0.5 us an element through powf (32% of a GPT-2 LoRA step in the tab) against ~1 ns for a
    product. x * x * x rounds twice, so it may differ from powf's correctly rounded cube by an ulp;
    other exponents go to the numpy kernel."""
    if legacy or X.dtype != F32 or X.ndim == 0 or Y.size != 1 or Y.ndim > X.ndim or Y.dtype.kind not in "fiu":
        return None
    e = float(Y.reshape(()))
    if e == 2.0:
        return (np.multiply(X, X),)
    if e == 3.0:
        y = np.multiply(X, X)
        np.multiply(y, X, out=y)
        return (y,)
    return None


def unary(name: str):
    """The element-wise float32 kernel ``name(x, y, n)`` (exp, erf, tanh) as a registry.accelerate kernel, on the
    helper threads from THREADS_MIN_ELEMENTS[name] elements."""
    def run(ctx, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
        if not plain(X):
            return None
        y = np.empty_like(X)
        threaded(name, X.size, THREADS_MIN_ELEMENTS[name])(ptr(X), ptr(y), X.size)
        return (y,)
    return run


#: HardSigmoid/HardSwish and their gradients take the kernel from one element: on squeeze-excite's (8, 72, 1, 1)
#: map the numpy kernels cost 57 / 60 / 107 us (HardSigmoid, its gradient, HardSwish; numpy 1.17's np.clip alone
#: ~44 us) against the route's 16 / 19 / 12 us, since an address costs ~1 us (address.py; Chromium, Pyodide 0.17.1,
#: best of 15 x 300, load ~7).
HARD_MIN_ELEMENTS = 1


def hard_activation(kind: int):
    """HardSigmoid (kind 1) or HardSwish (kind 2) of a float32 tensor in one pass (elementwise.c
    hard_activation, on a copy), for registry.accelerate: numpy makes four passes with their temporaries
    (a MobileNetV3 training step's forward runs them unfused). Any size: see HARD_MIN_ELEMENTS."""
    def run(ctx, X: np.ndarray, **attrs) -> Optional[Tuple[np.ndarray]]:
        if not plain(X, min_size=HARD_MIN_ELEMENTS):
            return None
        y = X.copy()
        if kind == 1:
            alpha = float(np.float32(attrs.get("alpha", 0.2)))
            beta = float(np.float32(attrs.get("beta", 0.5)))
        else:
            alpha, beta = float(np.float32(1.0 / 6.0)), 0.5
        kernels.hard_activation(ptr(y), y.size, kind, alpha, beta)
        return (y,)
    return run


def hard_activation_grad(kind: int):
    """HardSigmoidGrad (kind 1) or HardSwishGrad (kind 2) of float32 tensors of one shape in one pass
    (elementwise.c hard_activation_grad: the numpy kernel's float32 operations), for registry.accelerate:
    numpy makes five or six passes with their temporaries (every activation of a MobileNetV3 step). Any size: see
    HARD_MIN_ELEMENTS."""
    def run(ctx, dY: np.ndarray, X: np.ndarray, **attrs) -> Optional[Tuple[np.ndarray]]:
        if not plain(dY, X, min_size=HARD_MIN_ELEMENTS):
            return None
        alpha = float(np.float32(attrs.get("alpha", 0.2))) if kind == 1 else 0.0
        beta = float(np.float32(attrs.get("beta", 0.5))) if kind == 1 else 0.0
        dx = np.empty(X.shape, dtype=np.float32)
        kernels.hard_activation_grad(ptr(dY), ptr(X), ptr(dx), X.size, kind, alpha, beta)
        return (dx,)
    return run
