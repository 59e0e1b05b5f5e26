"""Layer 5, differentiation: the exporters' tanh-GELU chain as one ``ai.pytrain.Gelu`` node in the training model,
before its gradients are built, so the backward pass is one ``GeluGrad`` node instead of a dozen element-wise passes
(what onnxruntime's training graph does with its FastGeluFusion: com.microsoft FastGelu and FastGeluGrad). The
plan-time fusion (pytrain.engine.fusion) cannot do this: it runs after autodiff, where the gradient nodes read the
chain's intermediates. The node is pytrain's own (``ai.pytrain``, ONNX Gelu's meaning and attribute): ONNX's Gelu
exists from opset 20 only, and the model keeps its own opset.

The chain (X any tensor; a constant is a Constant node's value or an initializer that is no parameter, a 0-d
float32 or float64 scalar; Mul's and Add's operands either way round), as HF GPT-2's ``gelu_new`` and torch's
``F.gelu(approximate="tanh")`` before opset 20 export (TorchScript, dynamo, optimum):
``t = Tanh(Mul(Add(X, Mul(C, 0.044715)), sqrt(2/pi)))`` with the cube ``C`` as ``Pow(X, 3)`` or
``Mul(X, Mul(X, X))``, then ``a = Add(t, 1)`` and the output ``X * a * 0.5`` in any order the exporters write:
``Mul(Mul(X, 0.5), a)``, ``Mul(Mul(X, a), 0.5)``, ``Mul(Mul(a, 0.5), X)``. The rewrite changes nothing but float32
rounding: ``Gelu`` computes the same formula (pytrain.ops.elementwise.op_gelu). A chain whose intermediate is read
by another node or is a graph output stays as it is, and so does one with another constant, exponent or dtype.
The erf form (``X * (Erf(X / sqrt(2)) + 1) * 0.5``) stays unfused: its GeluGrad recomputes the erf the chain's
gradient reads from the forward pass (measured slower natively and in the tab, tiny BERT: 23.9 against 20.6 ms).
The exported inference model is built from the user's nodes, not from these (pytrain.generator.artifacts).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from pytrain.engine.graph import consumers, producers
from pytrain.ops.control.subgraph import outer_names
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto import NodeProto, make_node, to_array

#: the chains' irrational constants as float64; an exporter writes them rounded to the model's float type
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def _standard(n: Optional[NodeProto], op_type: str) -> bool:
    return n is not None and n.op_type == op_type and (n.domain or "") in ("", "ai.onnx") and \
        len(n.input) == (1 if op_type == "Tanh" else 2) and len(n.output) == 1 and not n.attribute


class _Chain:
    """The graph's facts a match reads: producers, readers and the scalar constants."""

    def __init__(self, nodes: Sequence[NodeProto], initializers: Mapping[str, object]) -> None:
        self.made = producers(nodes)
        self.readers = consumers(nodes)
        self.initializers = initializers
        self.dtype: Optional[np.dtype] = None  # the float type of the constants matched so far

    def scalar(self, name: str) -> Optional[np.ndarray]:
        """The 0-d value of ``name`` when it is a constant, else None (a tensor of any other shape is not read)."""
        n = self.made.get(name)
        if n is not None:
            if n.op_type != "Constant" or (n.domain or "") not in ("", "ai.onnx") or len(n.attribute) != 1:
                return None
            a = n.attribute[0]
            if a.name == "value_float":
                return np.array(a.f, dtype=np.float32)
            if a.name != "value" or len(a.t.dims):
                return None
            tensor = a.t
        elif name in self.initializers:
            tensor = self.initializers[name]
            if len(tensor.dims):  # type: ignore[attr-defined]
                return None
        else:
            return None
        return to_array(tensor, "the model's constants")  # type: ignore[arg-type]

    def is_const(self, name: str, target: float, exact: bool = True, any_type: bool = False) -> bool:
        """Whether ``name`` is the constant ``target`` (``exact``, or within float32 rounding) of the chain's
        float type (float32 or float64; ``any_type``: an exponent, any real type)."""
        v = self.scalar(name)
        if v is None or v.dtype.kind not in ("fiu" if any_type else "f"):
            return False
        if not any_type:
            if v.dtype not in (np.float32, np.float64) or (self.dtype is not None and v.dtype != self.dtype):
                return False
            self.dtype = v.dtype
        x = float(v)
        return x == target if exact else abs(x - target) <= 1e-6 * abs(target)

    def mul_by(self, name: str, op: str, target: float, exact: bool = True) -> Optional[Tuple[NodeProto, str]]:
        """(the ``op`` node making ``name``, its other operand) when one operand is the constant ``target``."""
        n = self.made.get(name)
        if not _standard(n, op):
            return None
        a, b = n.input
        if self.is_const(b, target, exact):
            return n, a
        if op in ("Mul", "Add") and self.is_const(a, target, exact):
            return n, b
        return None

    def sole_reader(self, name: str, op: str) -> Optional[NodeProto]:
        found = self.readers.get(name, [])
        return found[0] if len(found) == 1 and _standard(found[0], op) else None


def _cube(ch: _Chain, name: str, x: str) -> Optional[List[NodeProto]]:
    """The nodes making ``name`` as x^3: Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x)."""
    n = ch.made.get(name)
    if _standard(n, "Pow") and n.input[0] == x and ch.is_const(n.input[1], 3.0, any_type=True):
        return [n]
    if not _standard(n, "Mul"):
        return None
    for sq, other in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
        s = ch.made.get(sq)
        if other == x and _standard(s, "Mul") and list(s.input) == [x, x]:
            return [s, n]
    return None


def _tanh_inner(ch: _Chain, t: NodeProto) -> Optional[Tuple[str, List[NodeProto]]]:
    """(X, the nodes from X to ``t``) for t = Tanh(sqrt(2/pi) * (X + 0.044715 * X^3))."""
    scaled = ch.mul_by(t.input[0], "Mul", _SQRT_2_OVER_PI, exact=False)
    if scaled is None or not _standard(ch.made.get(scaled[1]), "Add"):
        return None
    add = ch.made[scaled[1]]
    for x, k in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        kappa = ch.mul_by(k, "Mul", _CUBIC, exact=False)
        cube = _cube(ch, kappa[1], x) if kappa is not None else None
        if cube is not None:
            return x, cube + [kappa[0], add, scaled[0], t]
    return None


def _outer(ch: _Chain, a: NodeProto, x: str) -> Optional[List[NodeProto]]:
    """The two Mul nodes making X * a * 0.5 from ``a``'s output, in an order the exporters write."""
    m1 = ch.sole_reader(a.output[0], "Mul")
    if m1 is None:
        return None
    other = m1.input[1] if m1.input[0] == a.output[0] else m1.input[0]
    if other == x:   # (X * a) * 0.5
        m2 = ch.sole_reader(m1.output[0], "Mul")
        return [m1, m2] if m2 is not None and ch.mul_by(m2.output[0], "Mul", 0.5) is not None else None
    if ch.is_const(other, 0.5):   # (a * 0.5) * X
        m2 = ch.sole_reader(m1.output[0], "Mul")
        return [m1, m2] if m2 is not None and x in m2.input and m1.output[0] in m2.input else None
    half = ch.mul_by(other, "Mul", 0.5)   # (X * 0.5) * a
    if half is not None and half[1] == x:
        return [half[0], m1]
    return None


def _match(ch: _Chain, t: NodeProto) -> Optional[Tuple[str, List[NodeProto]]]:
    """(X, the chain's nodes) for the chain through the Tanh ``t``, or None."""
    ch.dtype = None
    inner = _tanh_inner(ch, t)
    if inner is None:
        return None
    x, chain = inner
    a = ch.sole_reader(t.output[0], "Add")
    if a is None or ch.mul_by(a.output[0], "Add", 1.0) is None:
        return None
    outer = _outer(ch, a, x)
    return None if outer is None else (x, chain + [a] + outer)


def fuse_gelu(nodes: List[NodeProto], initializers: Mapping[str, object], keep: Sequence[str],
              fresh: Callable[[str], str]) -> int:
    """Rewrite ``nodes`` in place: each GELU chain whose intermediates nothing else reads (``keep``: the graph's
    outputs; a subgraph's reads count) becomes one ``ai.pytrain.Gelu`` node (approximate 'tanh') where its last
    node was; the Constant nodes only it read go too. ``initializers``: {name: TensorProto} of the initializers
    that are no parameters; ``fresh``: a unique node name from a hint. Returns the number of chains fused."""
    ch = _Chain(nodes, initializers)
    kept: Set[str] = set(keep)
    for n in nodes:   # a subgraph's reads of the enclosing scope are reads too
        kept.update(outer_names(n))
    gone: Set[int] = set()
    placed: Dict[int, NodeProto] = {}
    for t in [n for n in nodes if _standard(n, "Tanh")]:
        found = _match(ch, t)
        if found is None:
            continue
        x, chain = found
        ids = {id(n) for n in chain}
        inner = [o for n in chain[:-1] for o in n.output]
        if ids & gone or any(o in kept or any(id(r) not in ids for r in ch.readers.get(o, [])) for o in inner):
            continue   # an intermediate is read elsewhere: the chain stays
        gone |= ids
        last = chain[-1]
        placed[id(last)] = make_node("Gelu", [x], [last.output[0]], name=fresh((t.name or last.output[0]) + "/Gelu"),
                                     domain=PYTRAIN_DOMAIN, approximate="tanh")
    if not placed:
        return 0
    read_after = {i for n in nodes if id(n) not in gone for i in n.input}
    out: List[NodeProto] = []
    for n in nodes:
        if id(n) in placed:
            out.append(placed[id(n)])
        elif id(n) not in gone and not (n.op_type == "Constant" and n.output and n.output[0] not in read_after
                                        and n.output[0] not in kept and any(
                                            id(r) in gone for r in ch.readers.get(n.output[0], []))):
            out.append(n)
    nodes[:] = out
    return len(placed)
