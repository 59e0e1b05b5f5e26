"""Weights a converter stored as ``Constant`` nodes, lifted to initializers.

Some converters write every weight as a Constant node (paddle2onnx, older tf2onnx: hundreds in one
detector). Lifted, each becomes an initializer under its output's name, so the rule of
:mod:`pytrain.trainable` decides whether it trains exactly as for a weight stored as an initializer,
and the exported model holds it as one. Only float tensors held in ``value`` are candidates (integer
shapes and axes never train), and only those the rule would train are lifted: the others (a dynamo
export's folded constants) stay nodes, as the file wrote them. A graph output stays a node.

A file keeps its weights one way. When some of its initializers would train, it stores its weights as
initializers, and its float Constants are what its exporter computed or held as buffers (Optimum's and
TorchScript's rotary ``inv_freq``, which PyTorch never trains): none is lifted."""
from __future__ import annotations

from typing import Any, Dict

from pytrain.base import dtypes
from pytrain.proto import GraphProto, NodeProto
from pytrain.proto.onnx_pb import AttributeType
from pytrain.generator.trainable import classify_initializers


def _float_value(n: NodeProto):
    if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or len(n.output) != 1 or not n.output[0]:
        return None
    if len(n.attribute) != 1 or n.attribute[0].name != "value" or n.attribute[0].type != AttributeType.TENSOR:
        return None
    t = n.attribute[0].t
    return t if t is not None and dtypes.is_float(t.data_type) else None


def lift_constant_weights(graph: GraphProto) -> int:
    """Move the graph's float Constant nodes that would train as initializers into its initializers
    (in place); returns how many. The others (an exporter's folded scalars and masks) stay nodes."""
    outputs = {o.name for o in graph.output}
    candidates: Dict[str, Any] = {}
    for n in graph.node:
        t = _float_value(n)
        if t is not None and n.output[0] not in outputs:
            candidates[n.output[0]] = t
    if not candidates or any(r["trains"] for r in classify_initializers(
            list(graph.node), list(graph.initializer), list(graph.value_info) + list(graph.input))):
        return 0
    rest = [n for n in graph.node if not (n.output and n.output[0] in candidates and n.op_type == "Constant")]
    for name, t in candidates.items():
        t.name = name
    report = classify_initializers(rest, list(graph.initializer) + list(candidates.values()),
                                   list(graph.value_info) + list(graph.input))
    lift = {r["name"] for r in report if r["trains"] and r["name"] in candidates}
    if lift:
        graph.node = [n for n in graph.node if not (n.op_type == "Constant" and n.output and n.output[0] in lift)]
        graph.initializer.extend(candidates[k] for k in candidates if k in lift)
    return len(lift)
