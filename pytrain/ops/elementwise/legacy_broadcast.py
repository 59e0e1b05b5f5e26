"""Opset 1-6 broadcasting of Add, Sub, Mul, Div and Pow (attributes ``broadcast`` and ``axis``): with
``broadcast=1`` B is broadcast to A, its dims matching A's from ``axis`` on (without ``axis``, A's last
dims); with ``broadcast=0`` both have one shape. A node without the attributes broadcasts as numpy does
(the spec wants one shape there: the same values where the model is valid, and the gradient nodes of a
training model of such an opset are written that way). Opset 7 replaced it with numpy's broadcasting, which
means the same once B has A's trailing dims as 1s: :func:`align` gives B that shape.

Gemm-1/6 broadcast C only with ``broadcast=1`` (numpy's unidirectional broadcast, Gemm-7's); without it C
has the output's shape.

The arithmetic kernels and Gemm's know none of this: every plan (pytrain/engine/legacy_forms.py) puts an
``ai.pytrain.LegacyBroadcast`` node, this module's kernel, before a node carrying the attributes (a Gemm-1/6
without ``broadcast=1``), which then runs as today's op on the aligned B (the checked C). Never in a model
file."""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.elementwise.op_clip import refuse_legacy
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel

#: the ops whose opset 1-6 forms carry ``broadcast``/``axis``
OPS = ("Add", "Sub", "Mul", "Div", "Pow")


def align(op: str, ctx: Any, A: np.ndarray, B: np.ndarray, legacy: Dict[str, Any]) -> np.ndarray:
    """B shaped so that numpy's broadcasting against A means the legacy ``broadcast``/``axis``."""
    refuse_legacy(op, ctx, legacy, ignored=("broadcast", "axis", "consumed_inputs"))
    if ctx.opset >= 7:
        raise InputError("%s %r: attributes broadcast/axis are %s-1/6's (before opset 7)" % (op, ctx.node_name, op))
    if not int(legacy.get("broadcast", 0)):
        if A.shape != B.shape:
            raise InputError("%s %r: without broadcast=1 (opset %d) A and B must have one shape, got %s and %s"
                             % (op, ctx.node_name, ctx.opset, list(A.shape), list(B.shape)))
        return B
    axis = legacy.get("axis")
    if axis is None or B.size == 1 and B.ndim <= A.ndim:
        return B  # the last dims (suffix matching), or a scalar: numpy's meaning
    axis = int(axis) + (A.ndim if int(axis) < 0 else 0)
    if not 0 <= axis <= A.ndim - B.ndim or tuple(A.shape[axis:axis + B.ndim]) != tuple(B.shape):
        raise InputError("%s %r: B of shape %s does not match A's dims %s from axis %d"
                         % (op, ctx.node_name, list(B.shape), list(A.shape), axis))
    return B.reshape(B.shape + (1,) * (A.ndim - axis - B.ndim))


def gemm_bias(ctx: Any, A: np.ndarray, B: np.ndarray, C: np.ndarray, transA: int, transB: int) -> np.ndarray:
    """Gemm-1/6's C without ``broadcast=1``: the output's shape, as is (opset 7 on broadcasts it)."""
    out = (A.shape[1 if transA else 0], B.shape[0 if transB else 1]) if A.ndim == 2 and B.ndim == 2 else None
    if out is not None and tuple(C.shape) != out:
        raise InputError("Gemm %r: C of shape %s is not the output's %s and broadcast is not set (opset %d)"
                         % (ctx.node_name, list(C.shape), list(out), ctx.opset))
    return C


@kernel("LegacyBroadcast", domain=PYTRAIN_DOMAIN)
def legacy_broadcast(ctx: OpContext, A: np.ndarray, B: np.ndarray, C: Optional[np.ndarray] = None, *, op: str,
                     transA: int = 0, transB: int = 0, **legacy: Any) -> tuple:
    """B aligned to A as ``op``'s opset 1-6 attributes (``legacy``) say, with :func:`align`'s checks; for
    ``op`` Gemm, its C checked against A and B (transposed as ``transA``/``transB`` say)."""
    if op == "Gemm":
        return (gemm_bias(ctx, A, B, C, int(transA), int(transB)),)
    return (align(op, ctx, A, B, legacy),)
