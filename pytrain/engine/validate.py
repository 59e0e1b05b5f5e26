"""The model boundary: every model that enters pytrain (a file, bytes, a ModelProto) is checked here
once, before any kernel, gradient rule or exporter sees it, for what ``onnx.checker`` would refuse and
pytrain could not mean: IR and opset versions, unique tensor names, nodes with the inputs and
attribute types their op takes, declared shapes within :mod:`pytrain.limits`.

What is checked against an op comes from its kernel's signature (positional inputs; keyword
attributes whose default says their type), so the checks grow with the op set instead of living in a
second table.
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Dict, Mapping, Optional, Set, Tuple, Union

from pytrain.base import dtypes, limits
from pytrain.errors import GraphError, ModelFormatError, UnsupportedOpError
from pytrain.engine.graph import node_label
from pytrain.base.opset_versions import SCHEMA_VERSIONS
from pytrain.base.layout import ARTIFACT_KEY
from pytrain.proto.external_data import external_tensors, load_external_data
from pytrain.proto.helper import attribute_type, check_attribute_value
from pytrain.proto.onnx_pb import AttributeType, Dimension, GraphProto, ModelProto, NodeProto, ValueInfoProto
from pytrain.proto.value_types import refuse_non_tensor_values

#: what :func:`load_model` reads: a path, bytes, or a ModelProto (pytrain's or ``onnx``'s)
ModelSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, ModelProto, Any]

#: IR versions pytrain reads (ONNX 1.0's IR 3 up to the newest onnx writes, with room for what comes next)
IR_VERSIONS = range(3, 16)
#: default-domain opsets pytrain reads (onnx 1.23 defines up to 28); which schema version of each op a
#: model's opset selects is checked node by node against what its kernel implements
OPSETS = range(1, 29)

#: the attribute type a kernel's default value implies (ONNX requires the declared type exactly: a FLOAT
#: attribute written as an INT is refused by onnx.checker, and by pytrain)
_TYPE_OF_DEFAULT = ((bool, AttributeType.INT), (int, AttributeType.INT), (float, AttributeType.FLOAT),
                    (str, AttributeType.STRING))
_LIST_TYPES = {AttributeType.INTS, AttributeType.FLOATS, AttributeType.STRINGS}


class _Arity:
    __slots__ = ("required", "most", "attr_types")

    def __init__(self, required: int, most: Optional[int], attr_types: Dict[str, int]) -> None:
        self.required = required        # positional inputs without a default
        self.most = most                # None: variadic
        self.attr_types = attr_types    # attribute name -> the AttributeType its default implies


_ARITY: Dict[Any, _Arity] = {}


def _arity(fn: Any) -> _Arity:
    got = _ARITY.get(fn)
    if got is None:
        params = list(inspect.signature(fn).parameters.values())[1:]  # drop ctx
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
        required = sum(1 for p in positional if p.default is p.empty)
        types: Dict[str, int] = {}
        for p in params:
            if p.kind != p.KEYWORD_ONLY or p.default is p.empty or p.default is None:
                continue
            for py, at in _TYPE_OF_DEFAULT:
                if isinstance(p.default, py):
                    types[p.name] = at
                    break
            else:
                if isinstance(p.default, (list, tuple)):
                    types[p.name] = -1  # some list type
        got = _ARITY[fn] = _Arity(required, None if variadic else len(positional), types)
    return got


def validate_model(model: ModelProto, label: str = "the model") -> None:
    """Raise ModelFormatError / GraphError (naming ``label``, the node and what is wrong) unless
    ``model`` is a well-formed ONNX model pytrain can mean."""
    if model.ir_version not in IR_VERSIONS:
        raise ModelFormatError("%s has IR version %d; pytrain reads IR versions %d to %d"
                               % (label, model.ir_version, IR_VERSIONS[0], IR_VERSIONS[-1]))
    seen_domains: Set[str] = set()
    for o in model.opset_import:
        domain = "" if o.domain in ("", "ai.onnx") else o.domain
        if domain in seen_domains:
            raise ModelFormatError("%s imports domain %r twice" % (label, o.domain or "ai.onnx"))
        seen_domains.add(domain)
        if domain == "" and o.version not in OPSETS:
            raise ModelFormatError("%s imports ai.onnx opset %d; pytrain reads opsets %d to %d"
                                   % (label, o.version, OPSETS[0], OPSETS[-1]))
    if "" not in seen_domains and any(not n.domain or n.domain == "ai.onnx" for n in model.graph.node):
        raise ModelFormatError("%s uses standard ops but imports no ai.onnx opset" % label)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    # pytrain's own artifacts keep the source model's opset while their gradient and loss nodes use
    # standard ops (CastLike, ...) as pytrain means them; the source model was checked when generated
    artifact = any(p.key == ARTIFACT_KEY for p in model.metadata_props)
    from pytrain.ops import get_kernel  # the registry imports every kernel module once, lazily

    if opset is not None and not artifact:
        for n in model.graph.node:
            versions = SCHEMA_VERSIONS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
            if not versions:
                continue
            if opset < versions[0]:
                raise GraphError("%s: node %s uses %s, which ONNX defines from opset %d on, but the model imports "
                                 "opset %d" % (label, node_label(n), n.op_type, versions[0], opset))
            info = get_kernel(n.op_type)
            selected = max(v for v in versions if v <= opset)
            if info is not None and selected < info.since:
                raise UnsupportedOpError(
                    "%s: node %s: opset %d selects %s-%d, whose meaning differs from the %s-%d pytrain implements; "
                    "export the model at opset %d or later" % (label, node_label(n), opset, n.op_type, selected,
                                                               n.op_type, info.since, info.since))
    validate_graph(model.graph, label)


def _value_type(v: ValueInfoProto, label: str) -> None:
    t = v.type
    if t is None:
        return
    tensor = t.tensor_type
    if tensor is None:
        return  # sequence/optional/map types: refused with their own message where they are read
    if tensor.HasField("elem_type"):
        if tensor.elem_type not in dtypes.NAMES and tensor.elem_type != 0:  # 0: not stated
            raise ModelFormatError("%s: %r is declared with element type %d, which ONNX does not define"
                                   % (label, v.name, tensor.elem_type))
    shape = tensor.shape
    if shape is not None:
        unknown_dims(shape)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]
        if all(d is not None for d in dims) and tensor.elem_type in dtypes.NAMES and tensor.elem_type:
            try:
                itemsize = dtypes.to_numpy(tensor.elem_type).itemsize
            except GraphError:
                itemsize = 1
            limits.check_tensor(dims, itemsize, "%s: %r as declared" % (label, v.name))


def unknown_dims(shape: Any) -> None:
    """Dims a converter wrote to mean "unknown", made unknown in place, as onnxruntime reads them: a
    negative size (``-1``), and a symbol that names nothing (``?``, empty), which would otherwise be one
    shared symbol every dim so named must agree on (an image's height and width both ``?``)."""
    for k, d in enumerate(shape.dim):
        vague = d.HasField("dim_param") and not d.dim_param.strip("?_- ")
        if (d.HasField("dim_value") and d.dim_value < 0) or vague:
            shape.dim[k] = Dimension()


def validate_graph(graph: GraphProto, label: str = "the model") -> None:
    """The graph-level checks of :func:`validate_model` (also for subgraphs)."""
    if not graph.output:
        raise ModelFormatError("%s: the graph has no outputs" % label)
    defined: Dict[str, str] = {}

    def define(name: str, what: str, allow_again: Tuple[str, ...] = ()) -> None:
        if not name:
            raise ModelFormatError("%s: %s has an empty name" % (label, what))
        if name in defined and defined[name] not in allow_again:
            raise ModelFormatError("%s: tensor name %r is defined twice (%s and %s)"
                                   % (label, name, defined[name], what))
        defined[name] = what

    for t in graph.initializer:
        define(t.name, "an initializer")
    for v in graph.input:
        # IR < 4 lists initializers among the inputs too
        define(v.name, "a graph input", allow_again=("an initializer",))
        _value_type(v, label)
    for v in list(graph.output) + list(graph.value_info):
        _value_type(v, label)
    from pytrain.ops import get_kernel  # the registry imports every kernel module once, lazily

    for n in graph.node:
        _check_attributes(n, label)
        for o in n.output:
            if o:
                define(o, "an output of node %s" % node_label(n))
        info = get_kernel(n.op_type, n.domain)
        if info is None:
            continue  # an unsupported op is refused, with the list of supported ones, where it is planned
        ar = _arity(info.numpy_fn)
        present = len(n.input)
        while present and not n.input[present - 1]:
            present -= 1
        if ar.most is not None and present > ar.most:
            raise GraphError("%s: node %s has %d inputs; %s takes at most %d"
                             % (label, node_label(n), present, n.op_type, ar.most))
        missing = [i for i in range(ar.required) if i >= len(n.input) or not n.input[i]]
        if missing:
            raise GraphError("%s: node %s lacks required input%s %s of %s (it has %d)"
                             % (label, node_label(n), "s" if len(missing) > 1 else "",
                                ", ".join(str(i) for i in missing), n.op_type, len(n.input)))
        if not any(o for o in n.output):
            raise GraphError("%s: node %s has no outputs" % (label, node_label(n)))
        for a in n.attribute:
            want = ar.attr_types.get(a.name)
            if want is None:
                continue
            got = a.type
            ok = got in _LIST_TYPES if want == -1 else got == want
            if not ok:
                raise GraphError("%s: node %s: attribute %r is of type %s, but %s's %r is %s"
                                 % (label, node_label(n), a.name, AttributeType.name_of(got), n.op_type,
                                    a.name, "a list" if want == -1 else AttributeType.name_of(want)))
    for n in graph.node:
        undefined = [i for i in n.input if i and i not in defined]
        if undefined:
            raise GraphError("%s: node %s reads %s, which no node, graph input or initializer produces"
                             % (label, node_label(n), ", ".join(repr(u) for u in undefined)))
    for v in graph.output:
        if v.name not in defined:
            raise ModelFormatError("%s: graph output %r is produced by no node, input or initializer"
                                   % (label, v.name))


def _check_attributes(n: NodeProto, label: str) -> None:
    names = [a.name for a in n.attribute]
    dupes = sorted({x for x in names if names.count(x) > 1})
    if dupes:
        raise GraphError("%s: node %s sets attribute %s more than once" % (label, node_label(n), ", ".join(dupes)))
    for a in n.attribute:
        if a.type == AttributeType.UNDEFINED:  # written by very old tools: state it, as ONNX now requires
            a.type = attribute_type(a)
            if a.type == AttributeType.UNDEFINED:
                raise GraphError("%s: node %s: attribute %r has no type and no value" % (label, node_label(n), a.name))
        check_attribute_value(a)
        if a.type == AttributeType.GRAPH and a.g is not None:
            validate_graph_subgraph(a.g, "%s, subgraph %r of node %s" % (label, a.name, node_label(n)))


def validate_graph_subgraph(graph: GraphProto, label: str) -> None:
    """Subgraphs (If/Loop bodies) read names of the enclosing graph, so only their own structure is checked."""
    if not graph.output:
        raise ModelFormatError("%s has no outputs" % label)
    for n in graph.node:
        _check_attributes(n, label)


def _read_source(source: ModelSource, what: str) -> "tuple[bytes, str]":
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "(%d bytes)" % len(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                return f.read(), path
        except FileNotFoundError:
            raise ModelFormatError("%s file %s does not exist" % (what, path)) from None
        except IsADirectoryError:
            raise ModelFormatError("%s path %s is a directory, expected an .onnx file" % (what, path)) from None
    if hasattr(source, "SerializeToString"):  # onnx.ModelProto, or ours
        return source.SerializeToString(), "(a %s object)" % type(source).__name__
    raise ModelFormatError("cannot read a %s from a %s: pass a path, bytes or a ModelProto"
                           % (what, type(source).__name__))


def load_model(source: ModelSource, what: str = "ONNX model",
               external_data: "Optional[Mapping[str, bytes]]" = None) -> ModelProto:
    """Read a model from a path, bytes, or an ``onnx.ModelProto``/pytrain ModelProto.

    Tensors kept in ONNX external data (``m.onnx.data``) are read in: from the model's folder when
    ``source`` is a path, from ``external_data`` ({location: bytes}) otherwise
    (:mod:`pytrain.proto.external_data`; a location leaving the model's folder is refused).
    Raises ModelFormatError naming the file when it is malformed, truncated, empty or not a model.
    """
    if isinstance(source, ModelProto):
        refuse_non_tensor_values(source, what)
        if any(True for _ in external_tensors(source)):
            source = load_external_data(ModelProto.FromString(source.SerializeToString()), None, external_data)
        return source
    data, label = _read_source(source, what)
    if not data:
        raise ModelFormatError("%s %s is empty" % (what, label))
    try:
        model = ModelProto.FromString(data)
    except ModelFormatError as e:
        raise ModelFormatError("%s %s is not a valid ONNX file: %s" % (what, label, e)) from None
    if model.graph is None:
        raise ModelFormatError("%s %s is not a valid ONNX model: it has no graph" % (what, label))
    if not model.opset_import:
        raise ModelFormatError("%s %s is not a valid ONNX model: it imports no opset" % (what, label))
    validate_model(model, "%s %s" % (what, label))
    refuse_non_tensor_values(model, "%s %s" % (what, label))
    if any(True for _ in external_tensors(model)):
        folder = os.path.dirname(os.path.abspath(os.fspath(source))) if isinstance(source, (str, os.PathLike)) else None
        load_external_data(model, folder, external_data)
    return model
