"""Mod: the element-wise remainder of A / B, with (multidirectional) broadcasting.

fmod=0: the remainder has the sign of the divisor (Python's ``%``, numpy's ``mod``, torch.remainder);
fmod=1: the sign of the dividend (C's ``fmod``, torch.fmod). The spec asks fmod=1 for floating types;
as onnx's reference implementation, pytrain computes fmod=0 for floats too (torch.remainder's meaning).
Integer division by zero gives 0 (numpy's convention; the spec leaves it undefined)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.registry import kernel


@kernel("Mod")
def mod(ctx, A, B, *, fmod=0):
    if fmod not in (0, 1):
        raise GraphError("Mod: attribute fmod must be 0 or 1, got %r" % (fmod,))
    if A.dtype != B.dtype:
        raise InputError("Mod: A is %s but B is %s; they must have one type" % (A.dtype, B.dtype))
    if A.dtype.kind not in "iuf":
        raise InputError("Mod: inputs must be numeric, got %s" % A.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.fmod(A, B) if fmod else np.mod(A, B)
    return (np.asarray(r, dtype=A.dtype),)
