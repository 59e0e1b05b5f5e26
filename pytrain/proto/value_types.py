"""pytrain computes with tensors only: a model whose values are sequences, optionals, maps or
sparse tensors is refused when it is loaded, naming the value (or node) and its type, instead of
running with a wrong meaning (an Identity on a sequence would otherwise stack it into one tensor)."""
from __future__ import annotations

from typing import Any, Optional

from pytrain.base import dtypes
from pytrain.errors import UnsupportedOpError
from pytrain.proto.onnx_pb import GraphProto, ModelProto, TypeProto

__all__ = ["NON_TENSOR_OPS", "describe_type", "refuse_non_tensor_values"]

#: ops that make or take sequences, optionals or maps
NON_TENSOR_OPS = frozenset([
    "SequenceConstruct", "SequenceEmpty", "SequenceAt", "SequenceInsert", "SequenceErase", "SequenceLength",
    "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
    "OptionalHasElement", "CastMap", "DictVectorizer", "ZipMap",
])


def describe_type(tp: Optional[TypeProto]) -> str:
    """A type as text, with pytrain's element names: tensor(float32), sequence(tensor(int64)), map(k, v)."""
    if tp is None:
        return "(no type)"
    if tp.tensor_type is not None:
        return "tensor(%s)" % dtypes.NAMES.get(tp.tensor_type.elem_type, "?").lower()
    if tp.sequence_type is not None:
        return "sequence(%s)" % describe_type(tp.sequence_type.elem_type)
    if tp.optional_type is not None:
        return "optional(%s)" % describe_type(tp.optional_type.elem_type)
    if tp.map_type is not None:
        return "map(%s, %s)" % (dtypes.NAMES.get(tp.map_type.key_type, "?").lower(),
                                describe_type(tp.map_type.value_type))
    if tp.sparse_tensor_type is not None:
        return "sparse_tensor(%s)" % dtypes.NAMES.get(tp.sparse_tensor_type.elem_type, "?").lower()
    return "(no type)"


def _is_tensor(tp: Optional[TypeProto]) -> bool:
    if tp is None:
        return True
    return (tp.sequence_type is None and tp.optional_type is None and tp.map_type is None
            and tp.sparse_tensor_type is None)


def _check_graph(graph: GraphProto, label: str) -> None:
    for where, values in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for v in values:
            if not _is_tensor(v.type):
                raise UnsupportedOpError("%s: %s %r has type %s; pytrain supports tensor values only (no "
                                         "sequence, optional, map or sparse types)"
                                         % (label, where, v.name, describe_type(v.type)))
    for n in graph.node:
        if (n.domain or "") in ("", "ai.onnx", "ai.onnx.ml") and n.op_type in NON_TENSOR_OPS:
            name = n.name or (n.output[0] if n.output else "?")
            raise UnsupportedOpError("%s: node %r (%s) makes or takes a sequence, optional or map value; pytrain "
                                     "supports tensor values only" % (label, name, n.op_type))
        for a in n.attribute:
            if not _is_tensor(a.tp):
                raise UnsupportedOpError("%s: node %r (%s) attribute %r has type %s; pytrain supports tensor "
                                         "values only" % (label, n.name, n.op_type, a.name, describe_type(a.tp)))
            for sub in ([a.g] if a.g is not None else []) + list(a.graphs):
                _check_graph(sub, "%s, subgraph %r of node %r" % (label, a.name, n.name))
    if graph.sparse_initializer:
        raise UnsupportedOpError("%s: the graph has sparse initializers (%s); pytrain supports dense tensors only"
                                 % (label, ", ".join(repr(s.values.name if s.values is not None else "?")
                                                     for s in graph.sparse_initializer)))


def refuse_non_tensor_values(model: Any, label: str = "the model") -> None:
    """Raise UnsupportedOpError naming the first sequence/optional/map/sparse value or node of ``model``."""
    graph = model.graph if isinstance(model, ModelProto) else model
    if graph is not None:
        _check_graph(graph, label)
