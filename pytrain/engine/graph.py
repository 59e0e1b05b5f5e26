"""Graph-level helpers shared by the generator, the executor and the exporter: topological
order, producers/consumers, fresh names, and a node builder that emits nodes with fresh outputs."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Union

import numpy as np

from pytrain.errors import GraphError
from pytrain.proto import GraphProto, NodeProto, from_array, make_node


def node_label(node: NodeProto) -> str:
    """How messages name a node: its name and op, e.g. ``'fc1/Gemm' (Gemm)``."""
    return "%r (%s)" % (node.name or (node.output[0] if node.output else "?"), node.op_type)


def topological_order(nodes: Sequence[NodeProto], available: Iterable[str]) -> List[NodeProto]:
    """Nodes ordered so each comes after the producers of its inputs (stable: keeps file order
    where it is already valid). Raises GraphError naming a node whose input nobody produces."""
    ready: Set[str] = set(available)
    ready.add("")
    pending = list(nodes)
    ordered: List[NodeProto] = []
    while pending:
        progressed = False
        rest = []
        for n in pending:
            if all(i in ready for i in n.input):
                ordered.append(n)
                ready.update(n.output)
                progressed = True
            else:
                rest.append(n)
        if not progressed:
            n = rest[0]
            missing = [i for i in n.input if i not in ready]
            produced_later = {o for m in rest for o in m.output}
            if any(m in produced_later for m in missing):
                raise GraphError("the graph has a cycle through node %s (inputs %s)" % (node_label(n), missing))
            raise GraphError("node %s reads %s, which no node, graph input or initializer produces"
                             % (node_label(n), ", ".join(repr(m) for m in missing)))
        pending = rest
    return ordered


def producers(nodes: Iterable[NodeProto]) -> Dict[str, NodeProto]:
    """The node producing each tensor, by name (empty names, ONNX's omitted optional outputs, left out)."""
    return {o: n for n in nodes for o in n.output if o}


def consumers(nodes: Iterable[NodeProto]) -> Dict[str, List[NodeProto]]:
    """The nodes reading each tensor, by name, in node order; a node reading a tensor in two of its inputs is
    listed twice (so the list's length is the number of reads). Empty names (omitted inputs) are left out."""
    out: Dict[str, List[NodeProto]] = {}
    for n in nodes:
        for i in n.input:
            if i:
                out.setdefault(i, []).append(n)
    return out


def all_names(graph: GraphProto) -> Set[str]:
    names = {v.name for v in graph.input} | {v.name for v in graph.output}
    names |= {t.name for t in graph.initializer} | {v.name for v in graph.value_info}
    for n in graph.node:
        names.update(n.input)
        names.update(n.output)
        if n.name:
            names.add(n.name)
    return names


class NameScope:
    """Hands out names not yet used in a graph."""

    def __init__(self, taken: Iterable[str]) -> None:
        self.taken = set(taken)

    def fresh(self, hint: str) -> str:
        name = hint
        k = 1
        while name in self.taken or not name:
            name = "%s_%d" % (hint, k)
            k += 1
        self.taken.add(name)
        return name


Operand = Union[str, None]


class NodeBuilder:
    """Appends nodes to ``nodes``, each output named freshly; constants become initializers.

    ``b.op("Mul", x, y)`` returns the new output's name; ``n_out=k`` returns a list of k names.
    A None operand becomes an empty (missing optional) input.
    """

    def __init__(self, scope: NameScope, prefix: str = "") -> None:
        self.scope = scope
        self.prefix = prefix
        self.nodes: List[NodeProto] = []
        self.initializers: Dict[str, np.ndarray] = {}

    def op(self, op_type: str, *inputs: Operand, domain: str = "", n_out: int = 1,
           out_names: Optional[Sequence[str]] = None, **attrs: Any) -> Any:
        hint = self.prefix + op_type
        outs = list(out_names) if out_names is not None else [self.scope.fresh(hint + "_out") for _ in range(n_out)]
        name = self.scope.fresh(hint)
        self.nodes.append(make_node(op_type, ["" if i is None else i for i in inputs], outs,
                                    name=name, domain=domain, **attrs))
        return outs[0] if n_out == 1 and out_names is None else outs

    def const(self, value: Any, dtype: Any = np.float32, hint: str = "const") -> str:
        """An initializer holding ``value`` (scalars become 0-d tensors)."""
        name = self.scope.fresh(self.prefix + hint)
        self.initializers[name] = np.asarray(value, dtype=dtype)
        return name

    def initializer_protos(self) -> list:
        return [from_array(v, k) for k, v in self.initializers.items()]
