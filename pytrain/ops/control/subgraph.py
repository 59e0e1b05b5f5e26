"""What a control-flow node reads besides its inputs, and its bodies as the executor binds them.

A subgraph may read any value of the scopes around it by name. :func:`outer_names` lists those names
(through nested bodies too); :func:`with_outer_inputs` gives the executor a copy of the node whose
inputs end with them, so ordering, liveness and slots see them as the inputs they are, and the kernel
receives their values after its own inputs. A :class:`Subgraph` is a body planned once: its feeds are
its formal inputs, then the node's outer names."""
from __future__ import annotations

from typing import Any, Iterable, List, Sequence, Set

from pytrain.proto import GraphProto, NodeProto
from pytrain.proto.onnx_pb import AttributeType


def subgraphs(node: NodeProto) -> List[GraphProto]:
    """The bodies held in ``node``'s graph attributes."""
    out: List[GraphProto] = []
    for a in node.attribute:
        if a.type == AttributeType.GRAPH and a.g is not None:
            out.append(a.g)
        elif a.type == AttributeType.GRAPHS:
            out.extend(a.graphs)
    return out


def graph_outer_names(graph: GraphProto) -> List[str]:
    """Names ``graph``'s nodes (and their bodies) read that the graph does not define itself."""
    defined: Set[str] = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined.add("")
    free: List[str] = []

    def need(names: Iterable[str]) -> None:
        for name in names:
            if name not in defined and name not in free:
                free.append(name)

    for n in graph.node:
        need(n.input)
        for g in subgraphs(n):
            need(graph_outer_names(g))
        defined.update(n.output)
    need(o.name for o in graph.output)
    return free


def outer_names(node: NodeProto) -> List[str]:
    """The enclosing scopes' values ``node``'s bodies read, in first-read order."""
    names: List[str] = []
    for g in subgraphs(node):
        names.extend(x for x in graph_outer_names(g) if x not in names)
    return names


def with_outer_inputs(node: NodeProto) -> NodeProto:
    """``node`` itself, or for a control-flow node a copy whose inputs end with its outer names."""
    outer = outer_names(node)
    if not outer:
        return node
    copy = NodeProto.FromString(node.SerializeToString())
    copy.input = list(node.input) + outer
    return copy


class Subgraph:
    """A body bound to a plan: ``run(formals, outer)`` returns its outputs in order."""

    __slots__ = ("plan", "n_formal", "graph")

    def __init__(self, plan: Any, n_formal: int, graph: GraphProto) -> None:
        self.plan = plan          # a pytrain.engine.executor.Plan whose feeds are the formals, then the outer names
        self.n_formal = n_formal
        self.graph = graph

    @property
    def name(self) -> str:
        return self.graph.name or "body"

    @property
    def n_outer(self) -> int:
        """How many outer values the node passes after its own inputs."""
        return len(self.plan.feed_names) - self.n_formal

    def run(self, formals: Sequence[Any], outer: Sequence[Any]) -> List[Any]:
        return self.plan.run(list(formals) + list(outer))


def all_nodes(graph: GraphProto) -> Iterable[NodeProto]:
    """The graph's nodes and, after each control-flow node, those of its bodies (nested ones too)."""
    for n in graph.node:
        yield n
        for g in subgraphs(n):
            yield from all_nodes(g)
