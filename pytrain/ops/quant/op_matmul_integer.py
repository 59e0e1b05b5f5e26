"""MatMulInteger (opset 10): ``(A - a_zero_point) @ (B - b_zero_point)`` of 8-bit integers, exactly, as
int32. The product runs in float32 (the fast GEMM, the browser's wasm kernel) when every partial sum is an
integer below 2**24 and so exact, else in float64 (exact below 2**53)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.registry import kernel

_EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def centered(op: str, name: str, x: np.ndarray, zp: Optional[np.ndarray], zp_shape_ok: bool) -> np.ndarray:
    """``x - zp`` as int16 (8-bit values and zero points cannot overflow it)."""
    if x.dtype not in _EIGHT_BIT:
        raise InputError("%s: %s must be uint8 or int8, got %s" % (op, name, x.dtype))
    if zp is None:
        return x.astype(np.int16)
    if zp.dtype != x.dtype:
        raise InputError("%s: the zero point of %s is %s, %s is %s: they must be of one type"
                         % (op, name, zp.dtype, name, x.dtype))
    if not zp_shape_ok:
        raise InputError("%s: the zero point of %s has shape %s, which does not fit %s's shape %s"
                         % (op, name, list(zp.shape), name, list(x.shape)))
    return x.astype(np.int16) - zp.astype(np.int16)


def exact_product(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """``a @ b`` of small integer arrays (inner size ``k``) as int32, computed in the cheapest exact float."""
    bound = k * max(int(np.abs(a).max()) if a.size else 0, 1) * max(int(np.abs(b).max()) if b.size else 0, 1)
    ft = np.float32 if bound < (1 << 24) else np.float64
    return np.asarray(linalg.matmul(a.astype(ft), b.astype(ft))).astype(np.int32)


def _a_zero_point_fits(zp: np.ndarray, a: np.ndarray) -> bool:
    if zp.size == 1:
        return True
    if a.ndim == 2 and zp.shape == (a.shape[0],):
        return True
    return zp.ndim == a.ndim and zp.shape[-1] == 1 and zp.shape[-2] == a.shape[-2]


def _b_zero_point_fits(zp: np.ndarray, b: np.ndarray) -> bool:
    if zp.size == 1:
        return True
    if zp.ndim == 1:
        return zp.shape[0] == b.shape[-1]
    return zp.ndim == b.ndim and zp.shape[-2] == 1 and zp.shape[-1] == b.shape[-1]


@kernel("MatMulInteger", since=10)
def matmul_integer(ctx, A, B, a_zero_point=None, b_zero_point=None):
    op = "MatMulInteger"
    if A.ndim == 0 or B.ndim == 0 or A.shape[-1] != (B.shape[0] if B.ndim == 1 else B.shape[-2]):
        raise InputError("%s: A %s and B %s do not multiply" % (op, list(A.shape), list(B.shape)))
    a_zp = a_zero_point
    if a_zp is not None and a_zp.size > 1 and A.ndim == 2 and a_zp.ndim == 1:
        a_zp = a_zp.reshape(-1, 1)
    a = centered(op, "A", A, a_zp, a_zero_point is None or _a_zero_point_fits(a_zero_point, A))
    b = centered(op, "B", B, b_zero_point, b_zero_point is None or _b_zero_point_fits(b_zero_point, B))
    try:
        return (exact_product(a, b, A.shape[-1]),)
    except ValueError as e:
        raise InputError("%s: batch dimensions of A %s and B %s do not broadcast (%s)"
                         % (op, list(A.shape), list(B.shape), e)) from None
