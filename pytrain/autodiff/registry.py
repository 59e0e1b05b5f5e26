"""The gradient-rule table: one rule per op, registered with :func:`gradient`.

A rule receives the forward node (as :class:`ForwardNode`), a builder to emit backward nodes, and
the gradients of the node's outputs (names, or None where an output has no gradient), and returns
one gradient name (or None) per forward input. Rules read like derivatives.yaml entries::

    @gradient("Mul")
    def _(b, n, dy):
        return [b.unbroadcast(b.op("Mul", dy[0], n.x(1)), n.x(0)),
                b.unbroadcast(b.op("Mul", dy[0], n.x(0)), n.x(1))]
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pytrain.proto import NodeProto, node_attributes

#: what a rule takes (the output gradients) and returns (one gradient per input): tensor names, None for none
GradNames = List[Optional[str]]
GradFn = Callable[..., GradNames]


class Rule:
    __slots__ = ("fn", "inputs", "outputs", "when")

    def __init__(self, fn: GradFn, inputs: Optional[Tuple[int, ...]], outputs: Optional[Tuple[int, ...]],
                 when: Optional[Callable[["ForwardNode"], bool]]) -> None:
        self.fn = fn
        self.inputs = inputs     # differentiable input positions (None: all)
        self.outputs = outputs   # differentiable output positions (None: all)
        self.when = when         # extra condition (Cast: only to a float type)

    def input_differentiable(self, pos: int) -> bool:
        return self.inputs is None or pos in self.inputs

    def output_differentiable(self, pos: int) -> bool:
        return self.outputs is None or pos in self.outputs


_RULES: Dict[Tuple[str, str], Rule] = {}

#: Ops whose outputs carry no gradient (integer, boolean or piecewise-constant results).
NON_DIFFERENTIABLE = frozenset([
    "Shape", "Size", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or",
    "Xor", "ArgMax", "ArgMin", "ConstantOfShape", "Range", "Constant", "Floor", "Ceil", "Round", "Sign",
    "NonZero", "IsNaN", "IsInf", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
    "EyeLike", "OneHot", "Hardmax",
])

#: Ops the training graph replaces by a training form (whose rule then says what is differentiable).
TRAINING_FORM = {("", "BatchNormalization"): ("ai.pytrain", "BatchNormTraining")}


def gradient(op_type: str, domain: str = "", inputs: Optional[Sequence[int]] = None,
             outputs: Optional[Sequence[int]] = None,
             when: Optional[Callable[["ForwardNode"], bool]] = None) -> Callable[[GradFn], GradFn]:
    """Register the gradient rule of ``op_type``; ``inputs``/``outputs`` list the differentiable positions."""

    def register(fn: GradFn) -> GradFn:
        key = (domain, op_type)
        if key in _RULES:
            raise RuntimeError("gradient rule for %s registered twice" % (key,))
        _RULES[key] = Rule(fn, tuple(inputs) if inputs is not None else None,
                           tuple(outputs) if outputs is not None else None, when)
        return fn

    return register


def lookup(op_type: str, domain: str = "") -> Optional[Rule]:
    """The registered rule of an op, or None (the rules register when :mod:`pytrain.autodiff.rules`
    is imported: ask through it, ``rules.get_rule``)."""
    return _RULES.get(("" if domain in ("", "ai.onnx") else domain, op_type))


def registered() -> List[Tuple[str, str]]:
    """(domain, op type) of every registered rule."""
    return list(_RULES)


class ForwardNode:
    """The forward node as a gradient rule sees it."""

    def __init__(self, node: NodeProto, needs: Sequence[bool], scope: Any) -> None:
        self.node = node
        self.attrs: Dict[str, Any] = node_attributes(node)
        self._needs = list(needs)
        self._scope = scope

    def x(self, i: int) -> Optional[str]:
        """Name of input ``i``, or None when it is absent."""
        return self.node.input[i] if i < len(self.node.input) and self.node.input[i] else None

    def y(self, i: int = 0) -> str:
        """Name of output ``i``; an output the model left out is added (see :meth:`saved`)."""
        return self.saved(i)

    @property
    def n_inputs(self) -> int:
        return len(self.node.input)

    def needs(self, i: int) -> bool:
        """Whether input ``i`` needs a gradient (rules skip work for the others)."""
        return i < len(self._needs) and self._needs[i]

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def saved(self, i: int) -> str:
        """Output ``i`` of the forward node, asking the forward node to produce it if the model
        did not (LayerNormalization's Mean/InvStdDev, Dropout's mask, MaxPool's Indices): the
        gradient builds whatever optional outputs the model chose not to expose."""
        outs = self.node.output
        while len(outs) <= i:
            outs.append("")
        if not outs[i]:
            outs[i] = self._scope.fresh("%s_saved%d" % (self.node.name or self.node.op_type, i))
        return outs[i]
