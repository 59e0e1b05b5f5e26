"""Gemm: Y = alpha * A' @ B' + beta * C, with A' / B' optionally transposed and C broadcast (numpy's
unidirectional broadcast; before opset 7 only with the ``broadcast`` attribute: a plan checks C's shape
otherwise, pytrain/engine/legacy_forms.py)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.common import broadcasts_to
from pytrain.ops.registry import kernel


@kernel("Gemm")
def gemm(ctx, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    if A.ndim != 2 or B.ndim != 2:
        raise InputError("Gemm: A and B must be 2-D, got shapes %s and %s" % (A.shape, B.shape))
    a = A.T if transA else A
    b = B.T if transB else B
    if a.shape[1] != b.shape[0]:
        raise InputError("Gemm: inner dimensions differ: A' is %s, B' is %s (transA=%d, transB=%d)"
                         % (a.shape, b.shape, transA, transB))
    y = np.asarray(linalg.matmul(a, b), dtype=A.dtype)  # fresh array: updated in place below
    t = A.dtype.type
    if alpha != 1.0:
        y *= t(alpha)
    if C is not None and beta != 0.0:
        if not broadcasts_to(C.shape, y.shape):
            raise InputError("Gemm: C of shape %s does not broadcast to the output shape %s"
                             % (C.shape, y.shape))
        y += C if beta == 1.0 else C * t(beta)
    return (y,)
