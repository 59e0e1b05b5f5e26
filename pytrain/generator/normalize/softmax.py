"""Softmax and LogSoftmax before opset 13, written in ops every opset means alike.

Softmax-1/11 and LogSoftmax-1/11 coerce their input to 2-D at ``axis`` (default 1) and normalise
each row whole. The kernels run that meaning as it stands (``pytrain/ops/nn/op_softmax.py``); for
training, each such node is rewritten as Flatten(axis) -> op(axis=-1) -> Reshape(Shape(x)), so the
gradient rules (which mean one axis) and every exporter see only the single-axis case, which all
opsets agree on. A node on the last axis (declared rank) keeps its form with its axis spelled out."""
from __future__ import annotations

from typing import Dict, List

from pytrain.engine.graph import NameScope, all_names
from pytrain.proto import GraphProto, NodeProto, make_node, node_attributes, value_info_type
from pytrain.ops.nn.op_softmax import SINGLE_AXIS_OPSET

_OPS = ("Softmax", "LogSoftmax")


def declared_ranks(graph: GraphProto) -> Dict[str, int]:
    """Rank of every tensor whose shape the graph declares (inputs, outputs, value_info)."""
    ranks: Dict[str, int] = {}
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        try:
            _, shape = value_info_type(v)
        except Exception:  # a non-tensor type: no rank
            continue
        if shape is not None:
            ranks[v.name] = len(shape)
    return ranks


def coerce_softmax(graph: GraphProto, opset: int) -> int:
    """Rewrite the graph's pre-13 Softmax/LogSoftmax nodes in place; returns how many were rewritten."""
    if opset >= SINGLE_AXIS_OPSET:
        return 0
    ranks = declared_ranks(graph)
    scope = NameScope(all_names(graph))
    nodes: List[NodeProto] = []
    changed = 0
    for n in graph.node:
        if n.op_type not in _OPS or n.domain not in ("", "ai.onnx"):
            nodes.append(n)
            continue
        axis = int(node_attributes(n).get("axis", 1))
        rank = ranks.get(n.input[0])
        label = n.name or n.output[0]
        if axis == -1 or (rank is not None and axis in (rank - 1, -1)):
            nodes.append(make_node(n.op_type, list(n.input), list(n.output), name=n.name, axis=-1))
            continue
        shape = scope.fresh(label + "_shape")
        flat = scope.fresh(label + "_2d")
        y2 = scope.fresh(label + "_2d_out")
        nodes += [make_node("Shape", [n.input[0]], [shape], name=scope.fresh(label + "/Shape")),
                  make_node("Flatten", [n.input[0]], [flat], name=scope.fresh(label + "/Flatten"), axis=axis),
                  make_node(n.op_type, [flat], [y2], name=n.name or scope.fresh(label), axis=-1),
                  make_node("Reshape", [y2, shape], [n.output[0]], name=scope.fresh(label + "/Reshape"))]
        changed += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return changed
