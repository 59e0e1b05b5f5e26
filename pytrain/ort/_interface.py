"""ONNX Runtime's training-model interface on top of a pytrain training model.

ORT's ``TrainingBlock.to_model_proto()`` gives a training model any ONNX runtime can run: the
parameters are graph inputs, each gradient is accumulated into ``<p>_grad.accumulation.buffer``
unless ``lazy_reset_grad`` is true and comes out as ``<p>_grad.accumulation.out``. pytrain writes
its gradients with a few ops of its own domain (``ai.pytrain``); :func:`to_ort_interface` states
those in standard ONNX ops (so onnxruntime's inference package runs the model) and adds the
accumulation. :func:`strip_ort_interface` undoes the accumulation tail, giving back what
``pytrain.device.module.Module`` runs.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import UnsupportedOpError
from pytrain.engine.graph import NameScope, NodeBuilder, all_names
from pytrain.base.layout import ACC_BUFFER, ACC_OUT, LAZY_RESET, grad_name, read_layout
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto.onnx_pb import StringStringEntryProto
from pytrain.proto import ModelProto, NodeProto, make_value_info, model_metadata, node_attributes, \
    opset_version, value_info_type

#: metadata key marking a training model that carries ORT's accumulation interface
INTERFACE_KEY = "pytrain.ort.interface"

Shape = Optional[List[Any]]


def _known_types(model: ModelProto) -> Dict[str, Tuple[int, Shape]]:
    """Types of the model's values: declared ones, initializers, and what ONNX's shape inference
    adds when the ``onnx`` package is there (it is wherever onnxruntime is)."""
    g = model.graph
    types: Dict[str, Tuple[int, Shape]] = {}
    try:
        import onnx
        from onnx import shape_inference

        inferred = shape_inference.infer_shapes(onnx.load_model_from_string(model.SerializeToString()))
        for v in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
            if v.type.HasField("tensor_type"):
                tt = v.type.tensor_type
                shape = None
                if tt.HasField("shape"):
                    shape = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                             for d in tt.shape.dim]
                types[v.name] = (tt.elem_type, shape)
    except Exception:  # no onnx, or inference refused: the declared types below still hold
        pass
    for v in list(g.input) + list(g.output) + list(g.value_info):
        elem, shape = value_info_type(v)
        if elem or shape is not None:
            types.setdefault(v.name, (elem, shape))
    for t in g.initializer:
        types[t.name] = (t.data_type, [int(d) for d in t.dims])
    return types


class _Lowering(NodeBuilder):
    def __init__(self, scope: NameScope, types: Dict[str, Tuple[int, Shape]], opset: int) -> None:
        super().__init__(scope, prefix="ort/")
        self.types = types
        self.opset = opset

    def i64(self, values: Any) -> str:
        return self.const(np.asarray(values, dtype=np.int64), np.int64, "i64")

    def zero_like(self, name: str) -> str:
        elem = self.types.get(name, (dtypes.FLOAT, None))[0] or dtypes.FLOAT
        return self.const(np.zeros((), dtypes.to_numpy(elem)), dtypes.to_numpy(elem), "zero")

    def refuse(self, n: NodeProto, why: str) -> UnsupportedOpError:
        return UnsupportedOpError("node %r (%s.%s): %s, so the training model cannot be written in standard "
                                  "ONNX ops for ORT's interface" % (n.name, n.domain, n.op_type, why))

    # one method per pytrain gradient op: the same formula as its kernel, in standard ONNX ops
    def ReluGrad(self, n: NodeProto) -> None:
        dy, y = n.input[0], n.input[1]
        self.op("Where", self.op("Greater", y, self.zero_like(y)), dy, self.zero_like(dy), out_names=[n.output[0]])

    def SumToShape(self, n: NodeProto) -> None:
        dy, x = n.input[0], n.input[1]
        shape = self.types.get(x, (0, None))[1]
        if shape is None:
            raise self.refuse(n, "the rank of %r is unknown" % x)
        lead = self.op("Sub", self.op("Size", self.op("Shape", dy)), self.op("Size", self.op("Shape", x)))
        axes = self.op("Range", self.i64(0), lead, self.i64(1))
        s = self.op("ReduceSum", dy, axes, keepdims=0, noop_with_empty_axes=1)
        ones = [i for i, d in enumerate(shape) if d == 1]
        if ones:
            s = self.op("ReduceSum", s, self.i64(ones), keepdims=1)
        self.op("Reshape", s, self.op("Shape", x), out_names=[n.output[0]])

    def ReduceGrad(self, n: NodeProto) -> None:
        a = node_attributes(n)
        dy, x = n.input[0], n.input[1]
        if a.get("noop_with_empty_axes", 0):
            raise self.refuse(n, "noop_with_empty_axes=1 is not stated in standard ops here")
        axes = n.input[2] if len(n.input) > 2 and n.input[2] else (self.i64(a["axes"]) if a.get("axes") else None)
        g = dy
        if axes is not None and not a.get("keepdims", 1):
            g = self.op("Unsqueeze", g, axes)
        g = self.op("Expand", g, self.op("Shape", x))
        if a.get("mode", "sum") == "mean":
            elem = self.types.get(dy, (dtypes.FLOAT, None))[0] or dtypes.FLOAT
            count = self.op("Div", self.op("Cast", self.op("Size", x), to=elem),
                            self.op("Cast", self.op("Size", dy), to=elem))
            g = self.op("Div", g, count)
        self.op("Identity", g, out_names=[n.output[0]])

    def SoftmaxCrossEntropyLossGrad(self, n: NodeProto) -> None:
        a = node_attributes(n)
        dloss, log_prob, labels = n.input[0], n.input[1], n.input[2]
        weights = n.input[3] if len(n.input) > 3 and n.input[3] else None
        rank = len(self.types.get(labels, (0, None))[1] or [None]) if labels in self.types and \
            self.types[labels][1] is not None else 1
        elem = self.types.get(log_prob, (dtypes.FLOAT, None))[0] or dtypes.FLOAT
        ignore = a.get("ignore_index")
        if ignore is not None:
            ignored = self.op("Equal", labels, self.i64(int(ignore)))
            safe = self.op("Where", ignored, self.i64(0), labels)
        else:
            ignored, safe = None, labels
        w = self.op("Gather", weights, safe) if weights else \
            self.op("Cast", self.op("Mul", safe, self.i64(0)), to=elem)
        if not weights:
            w = self.op("Add", w, self.const(np.ones((), dtypes.to_numpy(elem)), dtypes.to_numpy(elem), "one"))
        if ignored is not None:
            w = self.op("Where", ignored, self.zero_like(log_prob), w)
        coef = self.op("Mul", w, dloss)
        if a.get("reduction", "mean") == "mean":
            coef = self.op("Div", coef, self.op("ReduceSum", w, keepdims=0))
        # one-hot of the labels along axis 1: labels (N, d...) against classes (C, 1, ...)
        classes = self.op("Range", self.i64(0), self.op("Gather", self.op("Shape", log_prob), self.i64(1)),
                          self.i64(1))
        if rank > 1:
            classes = self.op("Unsqueeze", classes, self.i64(list(range(1, rank))))
        onehot = self.op("Cast", self.op("Equal", self.op("Unsqueeze", safe, self.i64([1])), classes), to=elem)
        diff = self.op("Sub", self.op("Exp", log_prob), onehot)
        self.op("Mul", diff, self.op("Unsqueeze", coef, self.i64([1])), out_names=[n.output[0]])

    def CastLike(self, n: NodeProto) -> None:
        # the loss and its gradients are float32 unless the model declares otherwise
        elem = self.types.get(n.input[1], (0, None))[0] or dtypes.FLOAT
        self.op("Cast", n.input[0], to=elem, out_names=[n.output[0]])


def _lower(model: ModelProto, which: Any) -> None:
    """Replace the nodes ``which(node)`` selects by their statement in standard ONNX ops."""
    g = model.graph
    low = _Lowering(NameScope(all_names(g)), _known_types(model), opset_version(model))
    nodes: List[NodeProto] = []
    for n in g.node:
        if which(n):
            rule = getattr(low, n.op_type, None)
            if rule is None:
                raise low.refuse(n, "it has no statement in standard ONNX ops")
            low.nodes = []
            rule(n)
            nodes.extend(low.nodes)
        else:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(low.initializer_protos())


def standard_ops(model: ModelProto) -> ModelProto:
    """``model`` (changed in place) with CastLike stated as Cast where its opset lacks CastLike (< 15)."""
    if opset_version(model) < 15:
        _lower(model, lambda n: n.op_type == "CastLike" and not n.domain)
    return model


def to_ort_interface(model: ModelProto) -> ModelProto:
    """The pytrain training model ``model`` (changed in place and returned) in standard ONNX ops,
    with ORT's gradient accumulation inputs and outputs."""
    g = model.graph
    meta = model_metadata(model)
    layout = read_layout(meta, "training model", "training")
    standard_ops(model)  # first, so ONNX's shape inference understands the graph
    _lower(model, lambda n: n.domain == PYTRAIN_DOMAIN)
    low = _Lowering(NameScope(all_names(g)), {}, opset_version(model))
    nodes: List[NodeProto] = list(g.node)
    grads = layout.get("grads", [])
    trainable = layout.get("trainable", [])
    by_name = {v.name: v for v in g.input}
    lazy = make_value_info(LAZY_RESET, dtypes.BOOL, [1])
    acc_inputs, acc_outputs = [lazy], []
    pairs = list(zip(trainable, grads)) + [(i, grad_name(i)) for i in layout.get("input_grads", [])]
    grads = grads + [gn for _, gn in pairs[len(trainable):]]
    for p, gname in pairs:
        elem, shape = value_info_type(by_name[p]) if p in by_name else (dtypes.FLOAT, None)
        buf, out = ACC_BUFFER % p, ACC_OUT % p
        acc_inputs.append(make_value_info(buf, elem, shape))
        acc_outputs.append(make_value_info(out, elem, shape))
        low.nodes = []
        low.op("Where", LAZY_RESET, gname, low.op("Add", buf, gname), out_names=[out])
        nodes.extend(low.nodes)
    del g.node[:]
    g.node.extend(nodes)
    g.input.extend(acc_inputs)
    keep = [o for o in g.output if o.name not in set(grads)]
    del g.output[:]
    g.output.extend(keep[:len(layout["outputs"])] + acc_outputs + keep[len(layout["outputs"]):])
    if not any(n.domain == PYTRAIN_DOMAIN for n in g.node):
        kept = [o for o in model.opset_import if o.domain != PYTRAIN_DOMAIN]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    model.metadata_props.append(StringStringEntryProto(key=INTERFACE_KEY, value="1"))
    return model


def strip_ort_interface(model: ModelProto) -> ModelProto:
    """The training model without ORT's accumulation tail (pytrain's Module accumulates itself)."""
    if model_metadata(model).get(INTERFACE_KEY) != "1":
        return model
    g = model.graph
    layout = read_layout(model_metadata(model), "training model", "training")
    names = layout.get("trainable", []) + layout.get("input_grads", [])
    acc_out = {ACC_OUT % p for p in names}
    acc_in = {ACC_BUFFER % p for p in names} | {LAZY_RESET}
    nodes = [n for n in g.node if not (set(n.output) & acc_out or set(n.input) & acc_in)]
    del g.node[:]
    g.node.extend(nodes)
    ins = [v for v in g.input if v.name not in acc_in]
    del g.input[:]
    g.input.extend(ins)
    outs = [v for v in g.output if v.name not in acc_out]
    del g.output[:]
    g.output.extend(outs)
    return model
