"""MatMul: numpy matmul semantics (batched, broadcasting, 1-D operands), via linalg.matmul."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.registry import kernel


@kernel("MatMul")
def matmul(ctx, A, B):
    if A.ndim == 0 or B.ndim == 0:
        raise InputError("MatMul: inputs must have rank >= 1, got shapes %s and %s" % (A.shape, B.shape))
    ka = A.shape[-1]
    kb = B.shape[0] if B.ndim == 1 else B.shape[-2]
    if ka != kb:
        raise InputError("MatMul: inner dimensions differ: A %s has %d columns, B %s has %d rows"
                         % (A.shape, ka, B.shape, kb))
    try:
        y = linalg.matmul(A, B)
    except ValueError as e:
        raise InputError("MatMul: batch dimensions of A %s and B %s do not broadcast (%s)"
                         % (A.shape, B.shape, e)) from None
    return (np.asarray(y, dtype=A.dtype),)
