"""Every gradient rule, one entry per op, in one table (:mod:`pytrain.autodiff.registry`), written
one module per op family in the order of ``pytrain/ops/<family>/``. ``b`` builds nodes, ``n`` is
the forward node, ``dy`` the output gradients; each rule returns one gradient per forward input
(None: none). Formulas use standard ONNX ops where short, and pytrain's gradient kernels
(docs/ops.md)."""
from __future__ import annotations

from typing import List, Optional

from pytrain.autodiff.registry import Rule, lookup, registered
# importing a family registers its rules
from pytrain.autodiff.rules import (  # noqa: F401
    elementwise, nn, normalization, recurrent, shape, reduce, loss, quant, control)


def get_rule(op_type: str, domain: str = "") -> Optional[Rule]:
    """The gradient rule of an op (every family registered), or None."""
    return lookup(op_type, domain)


def differentiable_ops() -> List[str]:
    """Op types (with their domain prefix when not the default one) that have a gradient rule."""
    return sorted((d + "." if d else "") + op for d, op in registered())
