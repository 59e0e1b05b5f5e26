"""The node builder gradient rules write formulas with."""
from __future__ import annotations

from typing import Any, Callable, Optional

from pytrain.engine.graph import NameScope, NodeBuilder
from pytrain.ops.registry import PYTRAIN_DOMAIN


class GradBuilder(NodeBuilder):
    """A NodeBuilder with the few helpers every gradient formula needs."""

    def __init__(self, scope: NameScope, backward: Optional[Callable[..., Any]] = None) -> None:
        super().__init__(scope, prefix="grad/")
        #: the backward pass (pytrain.autodiff.engine.backward), for a rule differentiating a body (If)
        self.backward = backward

    def pt(self, op_type: str, *inputs: Optional[str], n_out: int = 1, **attrs: object) -> object:
        """A node of pytrain's own domain (gradient kernels, see docs/ops.md)."""
        return self.op(op_type, *inputs, domain=PYTRAIN_DOMAIN, n_out=n_out, **attrs)

    def pt_outputs(self, op_type: str, inputs: list, wanted: list, **attrs: object) -> list:
        """A multi-output pytrain node emitting only the outputs in ``wanted`` (others left empty,
        so the kernel can skip them). Returns one name or None per output."""
        names = [self.scope.fresh(self.prefix + op_type + "_out") if w else "" for w in wanted]
        self.op(op_type, *inputs, domain=PYTRAIN_DOMAIN, out_names=names, **attrs)
        return [n or None for n in names]

    def unbroadcast(self, grad: str, like: Optional[str]) -> str:
        """Sum ``grad`` back to the shape of ``like`` (reverses numpy broadcasting)."""
        return self.pt("SumToShape", grad, like)

    def scalar(self, value: float, like: str) -> str:
        """A 0-d constant with ``like``'s dtype."""
        return self.op("CastLike", self.const(value), like)

    def zeros_like(self, like: str) -> str:
        """Exact zeros shaped like ``like`` (not like * 0, which is NaN where ``like`` is inf or NaN)."""
        return self.op("Expand", self.scalar(0.0, like), self.op("Shape", like))
