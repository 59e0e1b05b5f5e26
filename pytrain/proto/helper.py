"""Building and reading ONNX messages: nodes, attributes, value infos, graphs, models."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from pytrain.errors import GraphError
from pytrain.proto.onnx_pb import (AttributeProto, AttributeType, Dimension, GraphProto, ModelProto,
                                   NodeProto, OperatorSetIdProto, StringStringEntryProto,
                                   TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor,
                                   ValueInfoProto)
from pytrain.proto.tensor import from_array, to_array

Dim = Union[int, str, None]


def make_attribute(name: str, value: Any) -> AttributeProto:
    """An AttributeProto whose type follows the Python value (int, float, str/bytes, array, lists)."""
    a = AttributeProto(name=name)
    if isinstance(value, AttributeProto):
        return value
    if isinstance(value, (bool, int, np.integer)):
        a.i, a.type = int(value), AttributeType.INT
    elif isinstance(value, (float, np.floating)):
        a.f, a.type = float(value), AttributeType.FLOAT
    elif isinstance(value, str):
        a.s, a.type = value.encode("utf-8"), AttributeType.STRING
    elif isinstance(value, bytes):
        a.s, a.type = value, AttributeType.STRING
    elif isinstance(value, TensorProto):
        a.t, a.type = value, AttributeType.TENSOR
    elif isinstance(value, np.ndarray):
        a.t, a.type = from_array(value), AttributeType.TENSOR
    elif isinstance(value, GraphProto):
        a.g, a.type = value, AttributeType.GRAPH
    elif isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(v, (bool, int, np.integer)) for v in items):
            a.ints, a.type = [int(v) for v in items], AttributeType.INTS
        elif all(isinstance(v, (int, float, np.integer, np.floating)) for v in items):
            a.floats, a.type = [float(v) for v in items], AttributeType.FLOATS
        elif all(isinstance(v, (str, bytes)) for v in items):
            a.strings = [v.encode("utf-8") if isinstance(v, str) else v for v in items]
            a.type = AttributeType.STRINGS
        elif all(isinstance(v, TensorProto) for v in items):
            a.tensors, a.type = items, AttributeType.TENSORS
        else:
            raise GraphError("attribute %r: cannot tell the ONNX type of list %r" % (name, value))
    else:
        raise GraphError("attribute %r: unsupported value of type %s" % (name, type(value).__name__))
    return a


def attribute_type(a: AttributeProto) -> int:
    """The attribute's type; very old writers omit it, and then it is the type of the field that is set."""
    if a.type != AttributeType.UNDEFINED:
        return a.type
    for field, typ in (("f", AttributeType.FLOAT), ("i", AttributeType.INT), ("s", AttributeType.STRING),
                       ("t", AttributeType.TENSOR), ("g", AttributeType.GRAPH),
                       ("floats", AttributeType.FLOATS), ("ints", AttributeType.INTS),
                       ("strings", AttributeType.STRINGS)):
        if a.HasField(field):
            return typ
    return AttributeType.UNDEFINED


def attribute_value(a: AttributeProto) -> Any:
    """The Python value of an attribute: strings decoded, tensors as numpy arrays."""
    t = attribute_type(a)
    check_attribute_value(a, t)
    if t == AttributeType.FLOAT:
        return a.f
    if t == AttributeType.INT:
        return a.i
    if t == AttributeType.STRING:
        return a.s.decode("utf-8", errors="replace")
    if t == AttributeType.TENSOR:
        return to_array(a.t, "attribute %r" % a.name)
    if t == AttributeType.GRAPH:
        return a.g
    if t == AttributeType.FLOATS:
        return list(a.floats)
    if t == AttributeType.INTS:
        return list(a.ints)
    if t == AttributeType.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeType.TENSORS:
        return [to_array(x) for x in a.tensors]
    if t == AttributeType.GRAPHS:
        return list(a.graphs)
    raise GraphError("attribute %r has unsupported type %d" % (a.name, t))


#: the field that holds an attribute's value, by attribute type
_VALUE_FIELD = {AttributeType.FLOAT: "f", AttributeType.INT: "i", AttributeType.STRING: "s",
                AttributeType.TENSOR: "t", AttributeType.GRAPH: "g", AttributeType.FLOATS: "floats",
                AttributeType.INTS: "ints", AttributeType.STRINGS: "strings", AttributeType.TENSORS: "tensors",
                AttributeType.GRAPHS: "graphs"}
_SINGULAR = (AttributeType.FLOAT, AttributeType.INT, AttributeType.STRING, AttributeType.TENSOR,
             AttributeType.GRAPH)


def check_attribute_value(a: AttributeProto, t: Optional[int] = None) -> None:
    """An attribute carries its value in the field its type names, and in no other (as onnx.checker
    requires): a TENSOR attribute without a tensor, or an INT one holding floats, is malformed."""
    t = a.type if t is None else t
    field = _VALUE_FIELD.get(t)
    if field is None:
        return
    if t in _SINGULAR and not a.HasField(field):
        raise GraphError("attribute %r is of type %s but has no value (its %r field is not set)"
                         % (a.name, AttributeType.name_of(t), field))
    others = [f for f in _VALUE_FIELD.values() if f != field and a.HasField(f)]
    if others:
        raise GraphError("attribute %r is of type %s but also sets %s: an attribute holds one value"
                         % (a.name, AttributeType.name_of(t), ", ".join(repr(f) for f in others)))


def node_attributes(node: NodeProto) -> Dict[str, Any]:
    """The node's attributes as a name -> Python value dict."""
    return {a.name: attribute_value(a) for a in node.attribute}


def make_node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: Optional[str] = None,
              domain: str = "", **attrs: Any) -> NodeProto:
    """A NodeProto; attributes whose value is None are left out."""
    n = NodeProto(op_type=op_type, input=list(inputs), output=list(outputs))
    if name:
        n.name = name
    if domain:
        n.domain = domain
    n.attribute = [make_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None]
    return n


def make_value_info(name: str, elem_type: int, shape: Optional[Sequence[Dim]] = None) -> ValueInfoProto:
    """A tensor ValueInfoProto; shape entries are ints, symbolic names, or None (unknown)."""
    tt = TypeProtoTensor(elem_type=elem_type)
    if shape is not None:
        dims = []
        for d in shape:
            if isinstance(d, (int, np.integer)):
                dims.append(Dimension(dim_value=int(d)))
            elif isinstance(d, str):
                dims.append(Dimension(dim_param=d))
            else:
                dims.append(Dimension())
        tt.shape = TensorShapeProto(dim=dims)
    return ValueInfoProto(name=name, type=TypeProto(tensor_type=tt))


def value_info_type(vi: ValueInfoProto) -> "tuple[int, Optional[List[Dim]]]":
    """(elem_type, shape) of a tensor ValueInfoProto; shape None when unknown, dims None when unknown."""
    if vi.type is None or vi.type.tensor_type is None:
        return 0, None
    tt = vi.type.tensor_type
    if tt.shape is None:
        return tt.elem_type, None
    dims: List[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tt.elem_type, dims


def make_graph(nodes: Iterable[NodeProto], name: str, inputs: Iterable[ValueInfoProto],
               outputs: Iterable[ValueInfoProto], initializers: Iterable[TensorProto] = (),
               value_info: Iterable[ValueInfoProto] = ()) -> GraphProto:
    return GraphProto(node=list(nodes), name=name, input=list(inputs), output=list(outputs),
                      initializer=list(initializers), value_info=list(value_info))


def make_opsetid(domain: str, version: int) -> OperatorSetIdProto:
    return OperatorSetIdProto(domain=domain, version=version)


# The IR version ONNX released alongside each opset, so a model declares no newer IR than it needs.
_IR_FOR_OPSET = ((13, 7), (14, 7), (15, 8), (16, 8), (17, 8), (18, 8), (19, 9), (20, 9), (21, 10))


def ir_version_for_opset(opset: int) -> int:
    """The lowest IR version that goes with ``opset`` (IR 7 for opsets up to 14)."""
    ir = 7
    for op, v in _IR_FOR_OPSET:
        if opset >= op:
            ir = v
    return ir


def make_model(graph: GraphProto, opset_imports: Sequence[OperatorSetIdProto],
               ir_version: Optional[int] = None, producer_name: str = "pytrain",
               metadata: Optional[Dict[str, str]] = None) -> ModelProto:
    """A ModelProto; the IR version defaults to the lowest one its default-domain opset allows."""
    from pytrain.base.version import __version__

    if ir_version is None:
        default = [o.version for o in opset_imports if o.domain in ("", "ai.onnx")]
        ir_version = ir_version_for_opset(default[0] if default else 13)
    m = ModelProto(ir_version=ir_version, producer_name=producer_name, producer_version=__version__,
                   graph=graph, opset_import=list(opset_imports))
    for k, v in sorted((metadata or {}).items()):
        m.metadata_props.append(StringStringEntryProto(key=k, value=v))
    return m


def model_metadata(model: ModelProto) -> Dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def opset_version(model: ModelProto, domain: str = "") -> int:
    """The model's opset for ``domain`` ("" = ai.onnx), or 0 when it imports none."""
    for o in model.opset_import:
        if (o.domain or "") in ((domain, "ai.onnx") if domain == "" else (domain,)):
            return int(o.version)
    return 0
