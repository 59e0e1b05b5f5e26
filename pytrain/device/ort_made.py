"""Artifacts ONNX Runtime's own ``generate_artifacts`` made, read by ORT's conventions: the one
reader, under both ``pytrain.api`` (``Module`` and ``Optimizer`` take ORT's files as they are) and
``pytrain.ort.api``.

ORT 1.19's training model takes the user inputs, then the parameters (the checkpoint's names), then
one ``<p>_grad.accumulation.buffer`` per trainable parameter and ``lazy_reset_grad``; each gradient
goes into its buffer through a ``com.microsoft:InPlaceAccumulatorV2`` node (overwriting when
``lazy_reset_grad`` is true) whose flag is the output ``<p>_grad.accumulation.out``; the loss comes
first among the outputs. pytrain's Module accumulates gradients the same way itself, so
:func:`from_ort_training` reads that interface into pytrain's training-model layout (the gradients
as outputs) and checks every accumulator is exactly that; anything else is refused by name. The
gradient ops ORT wrote run as kernels (``pytrain/ops/train/op_ort_training.py``); GRUTraining /
LSTMTraining and their gradients are read as ONNX's GRU/LSTM and pytrain's BPTT kernels. ORT's eval
model (user inputs, parameters, outputs) is read by :func:`load_eval_model`; its optimizer model, one
``com.microsoft`` AdamWOptimizer or SGDOptimizerV2 node over sequences, by :func:`ort_optimizer_spec`
(every attribute read) into pytrain's update of the same arithmetic. An op pytrain has no kernel
for is refused naming it, its domain and node, with the way out.

ORT fuses a LayerNorm the exporter decomposed (opset < 17) into its own ``LayerNormalization``
(ai.onnx domain, ORT's schema from version 1: ``axis``, ``epsilon``, ``stash_type``; outputs Y, Mean,
InvStdDev): the meaning of ONNX's opset-17 LayerNormalization, which pytrain runs. Such a model is
read by :func:`load_training_model`, which lets that one op through below opset 17 in a model
ORT made (the only change to what the loader checks).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pytrain.errors import ModelFormatError
from pytrain.engine.graph import producers as graph_producers
from pytrain.base.opset_versions import SCHEMA_VERSIONS
from pytrain.base.layout import ACC_BUFFER, ACC_OUT, ARTIFACT_KEY, LAYOUT_KEY, LAZY_RESET, read_layout
from pytrain.ops.registry import PYTRAIN_DOMAIN, get_kernel
from pytrain.proto import ModelProto, NodeProto, make_node, make_opsetid, make_value_info, model_metadata, \
    node_attributes, value_info_type
from pytrain.proto.external_data import external_tensors
from pytrain.proto.onnx_pb import StringStringEntryProto
from pytrain.proto.value_types import describe_type
from pytrain.engine.validate import load_model

#: domains of ORT's training and gradient ops
ORT_DOMAINS = ("com.microsoft", "ai.onnx.preview.training")
MS = "com.microsoft"
WAY_OUT = ("regenerate the artifacts from the inference model with pytrain.ort.artifacts.generate_artifacts "
           "(ORT's arguments; a checkpoint ORT wrote still loads and goes on training)")
ACC_SUFFIX = ACC_BUFFER % ""
#: AdamWOptimizer's attributes and their defaults in ORT's schema (training_op_defs.cc)
ADAMW_DEFAULTS = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-8, "weight_decay": 1e-2, "correct_bias": 1,
                  "adam_mode": 0}
#: the graph inputs ORT's Optimizer feeds, by optimizer node: the node's inputs in schema order
_OPTIMIZER_INPUTS = {"AdamWOptimizer": ["learning_rate", "step", "params", "gradients", "first_order_moments",
                                        "second_order_moments"],
                     "SGDOptimizerV2": ["learning_rate", "params", "gradients"]}


def read(uri: Any) -> ModelProto:
    if isinstance(uri, ModelProto):
        return uri
    if hasattr(uri, "SerializeToString"):
        return ModelProto.FromString(uri.SerializeToString())
    if isinstance(uri, (bytes, bytearray, memoryview)):
        return ModelProto.FromString(bytes(uri))
    with open(uri, "rb") as f:
        return ModelProto.FromString(f.read())


def _fuses_layernorm(model: ModelProto) -> bool:
    """``model`` holds ORT's fused LayerNormalization below the opset ONNX defines it from."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    first = SCHEMA_VERSIONS["LayerNormalization"][0]
    return opset is not None and opset < first and any(
        n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx") for n in model.graph.node)


def load_training_model(uri: Any, params: Sequence[str], what: str = "training model",
                        copy: bool = True) -> ModelProto:
    """The training model at ``uri``, ORT's read by ORT's conventions (:func:`from_ort_training`;
    one holding an op pytrain does not run is refused by name). One ORT made that holds ORT's fused
    LayerNormalization below opset 17 is read as ORT's (pytrain's layout added) before the loader
    checks it, which then checks everything but that op's opset; any other model is loaded as it is
    (a fresh copy unless not ``copy``). ``params``: the checkpoint's parameter names."""
    try:
        raw: Optional[ModelProto] = read(uri)
    except Exception:  # the loader reports a missing or damaged file in its own words
        raw = None
    if raw is not None and not (is_ort_training_model(raw) and _fuses_layernorm(raw)):
        raw = None  # read again below, checked: not held meanwhile (the weights twice)
    if raw is not None:
        if any(True for _ in external_tensors(raw)):
            raise _refuse(what, "it keeps tensors in external data, which pytrain reads only from models "
                          "without ORT's fused LayerNormalization")
        model = load_model(from_ort_training(raw, params, what).SerializeToString(), what)
    else:
        model = load_model(uri, what)
        if is_ort_training_model(model):
            model = from_ort_training(ModelProto.FromString(model.SerializeToString()), params, what)
        elif copy:
            model = ModelProto.FromString(model.SerializeToString())
    refuse_ort_made(model, what)
    return model


def load_eval_model(uri: Any, params: Sequence[str], train: ModelProto, what: str = "eval model") -> ModelProto:
    """The eval model at ``uri``: pytrain's as it is, or ORT's (no pytrain layout) read by ORT's
    conventions against ``train``, the training model it goes with."""
    model = load_model(uri, what)
    if LAYOUT_KEY not in model_metadata(model):
        layout = read_layout(model_metadata(train), "training model", "training")
        model = from_ort_eval(ModelProto.FromString(model.SerializeToString()), params,
                              layout["user_inputs"] + layout["labels"], what)
    refuse_ort_made(model, what)
    return model


def ops_without_kernel(model: ModelProto) -> List[Tuple[str, str, str]]:
    """(domain, op_type, first node name) of each op pytrain has no kernel for, once per op."""
    seen, out = set(), []
    for n in model.graph.node:
        domain = n.domain or "ai.onnx"
        key = (domain, n.op_type)
        if key in seen or get_kernel(n.op_type, n.domain or "") is not None:
            continue
        seen.add(key)
        out.append((domain, n.op_type, n.name or (n.output[0] if n.output else "?")))
    return out


def refuse_ort_made(uri: Any, what: str) -> None:
    """Raise ModelFormatError when ``uri`` is a model ORT generated holding ops pytrain has no kernel
    for (a model with ops of ORT's training domains), naming the ops, their nodes and domains.
    Anything else (unreadable, pytrain's own) is left to the loader, which names what is wrong."""
    try:
        model = read(uri)
    except Exception:  # the loader reports a missing or damaged file in its own words
        return
    missing = ops_without_kernel(model)
    ort_made = any(n.domain in ORT_DOMAINS for n in model.graph.node)
    if not missing or not ort_made:
        return
    shown = ", ".join("%s:%s (node %r)" % m for m in missing[:8])
    if len(missing) > 8:
        shown += " and %d more" % (len(missing) - 8)
    sequences = [i.name for i in model.graph.input if describe_type(i.type).startswith("sequence")]
    seq = ("; its inputs %s are sequences of tensors" % ", ".join(repr(s) for s in sequences)) if sequences else ""
    raise ModelFormatError("the %s was made by ONNX Runtime's generate_artifacts: it holds %s, which pytrain "
                           "does not run%s. To train it in pytrain, %s"
                           % (what, shown, seq, WAY_OUT))


def _refuse(what: str, why: str) -> ModelFormatError:
    return ModelFormatError("the %s does not follow ONNX Runtime's training-model conventions: %s. To train it "
                            "in pytrain, %s" % (what, why, WAY_OUT))


def is_ort_training_model(model: ModelProto) -> bool:
    """An ORT-interface training model pytrain did not write (no pytrain layout metadata)."""
    return LAYOUT_KEY not in model_metadata(model) and any(v.name == LAZY_RESET for v in model.graph.input)


def _split_inputs(model: ModelProto, params: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(user inputs, parameter inputs) of ``model``: a graph input the checkpoint names is a parameter."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    known = set(params)
    names = [v.name for v in g.input if v.name not in inits and v.name != LAZY_RESET and
             not v.name.endswith(ACC_SUFFIX)]
    return [n for n in names if n not in known], [n for n in names if n in known]


def _with_layout(model: ModelProto, kind: str, layout: Dict[str, Any]) -> ModelProto:
    model.metadata_props.extend([StringStringEntryProto(key=ARTIFACT_KEY, value=kind),
                                 StringStringEntryProto(key=LAYOUT_KEY, value=json.dumps(layout))])
    return model


def from_ort_training(model: ModelProto, params: Sequence[str], what: str = "training model") -> ModelProto:
    """ORT's training model ``model`` (changed in place and returned) as a pytrain training model:
    accumulators taken out, gradients as outputs, the layout read from ORT's conventions.
    ``params``: the checkpoint's parameter names."""
    g = model.graph
    user, param_inputs = _split_inputs(model, params)
    buffers = {v.name[:-len(ACC_SUFFIX)]: v.name for v in g.input if v.name.endswith(ACC_SUFFIX)}
    stray = sorted(p for p in buffers if p not in param_inputs)
    if stray:
        raise _refuse(what, "it accumulates gradients of %s, which %s no parameter of the checkpoint"
                      % (", ".join(repr(p) for p in stray), "is" if len(stray) == 1 else "are"))
    interface = set(buffers.values()) | {LAZY_RESET}
    producers = graph_producers(g.node)
    grads: Dict[str, str] = {}
    nodes: List[NodeProto] = []
    for n in g.node:
        if n.domain == MS and n.op_type == "InPlaceAccumulatorV2":
            p = _accumulated(n, buffers, what)
            grads[p] = n.input[1]
            continue
        if set(n.input) & interface:
            raise _refuse(what, "node %r (%s) reads %s, which only ORT's gradient accumulators read"
                          % (n.name, n.op_type, sorted(set(n.input) & interface)[0]))
        if n.op_type == "MaxPoolGrad" and n.domain in ("", "ai.onnx"):
            n = _maxpool_grad(n, producers, what)
        elif n.domain == MS and n.op_type in _RECURRENT:
            n = _recurrent(n, producers, g.node, what)
        nodes.append(n)
    trainable = [p for p in param_inputs if p in buffers]
    unfed = [p for p in trainable if p not in grads]
    if unfed:
        raise _refuse(what, "no InPlaceAccumulatorV2 fills the buffer of %r" % unfed[0])
    acc_outs = {ACC_OUT % p for p in trainable}
    outputs = [o for o in g.output if o.name not in acc_outs]
    types = {v.name: v for v in g.input}
    grad_infos = [make_value_info(grads[p], *value_info_type(types[p])) for p in trainable]
    del g.node[:]
    g.node.extend(nodes)
    kept = [v for v in g.input if v.name not in interface]
    del g.input[:]
    g.input.extend(kept)
    del g.output[:]
    g.output.extend(outputs + grad_infos)
    if any(n.domain == PYTRAIN_DOMAIN for n in nodes) and not any(o.domain == PYTRAIN_DOMAIN
                                                                 for o in model.opset_import):
        model.opset_import.append(make_opsetid(PYTRAIN_DOMAIN, 1))
    frozen = [p for p in param_inputs if p not in buffers]
    return _with_layout(model, "training", {
        "user_inputs": user, "labels": [], "trainable": trainable, "frozen": frozen,
        "outputs": [o.name for o in outputs], "grads": [grads[p] for p in trainable],
        "state_updates": _running_statistics(nodes, frozen)})


def _running_statistics(nodes: Sequence[NodeProto], frozen: Sequence[str]) -> Dict[str, str]:
    """{BatchNormInternal's running mean/var output: the parameter it updates}. ORT's kernel writes
    them in place into its inputs' buffers (MayInplace 3->1, 4->2), so after a train step in ORT the
    checkpoint's running statistics are the updated ones, though the graph outputs neither."""
    updates: Dict[str, str] = {}
    for n in nodes:
        if n.domain == MS and n.op_type == "BatchNormInternal":
            for i, o in ((3, 1), (4, 2)):
                if len(n.input) > i and n.input[i] in frozen and len(n.output) > o and n.output[o]:
                    updates[n.output[o]] = n.input[i]
    return updates


def _accumulated(n: NodeProto, buffers: Dict[str, str], what: str) -> str:
    """The parameter whose gradient accumulator ``n`` is, checked to be exactly ORT's."""
    p = next((q for q, b in buffers.items() if n.input and n.input[0] == b), None)
    ok = (p is not None and len(n.input) == 3 and n.input[1] and n.input[2] == LAZY_RESET and not n.attribute
          and n.output and n.output[0] == ACC_OUT % p and not any(n.output[1:]))
    if not ok:
        raise _refuse(what, "InPlaceAccumulatorV2 node %r is not (<p>%s, gradient, %s) -> <p>_grad.accumulation.out"
                      % (n.name, ACC_SUFFIX, LAZY_RESET))
    return p


def _maxpool_grad(n: NodeProto, producers: Dict[str, NodeProto], what: str) -> NodeProto:
    """ORT's MaxPoolGrad(dY, Indices) as pytrain's MaxPoolGrad(dY, Indices, X), X the input of the
    MaxPool whose Indices it reads (ORT takes dX's shape from its graph-time shape inference)."""
    src = producers.get(n.input[1]) if len(n.input) == 2 else None
    if src is None or src.op_type != "MaxPool" or src.domain not in ("", "ai.onnx") or \
            len(src.output) < 2 or src.output[1] != n.input[1]:
        raise _refuse(what, "MaxPoolGrad node %r does not read the Indices of a MaxPool" % n.name)
    attrs = node_attributes(n)
    if attrs != node_attributes(src):
        raise _refuse(what, "MaxPoolGrad node %r has attributes %s, its MaxPool %s"
                      % (n.name, sorted(attrs.items()), sorted(node_attributes(src).items())))
    return make_node("MaxPoolGrad", [n.input[0], n.input[1], src.input[0]], list(n.output), name=n.name,
                     domain=PYTRAIN_DOMAIN, storage_order=int(attrs.get("storage_order", 0)))


#: ORT's recurrent training op -> (ONNX op, outputs ONNX's has, its gradient op, the gradient's inputs as
#: positions in the forward's inputs (F) or its own (G): pytrain's GRUGrad/LSTMGrad order, recomputing
#: the gates ORT saved)
_RECURRENT = {"GRUTraining": ("GRU", 2), "LSTMTraining": ("LSTM", 3),
              "GRUGrad": ("GRUTraining", [("G", 0), ("G", 1), ("G", 2), ("G", 3), ("G", 4), ("G", 5), ("G", 8),
                                          ("G", 9)]),
              "LSTMGrad": ("LSTMTraining", [("G", 0), ("G", 1), ("G", 2), ("F", 3), ("G", 3), ("G", 4), ("G", 5),
                                            ("F", 7), ("G", 9), ("G", 10), ("G", 11)])}


def _recurrent(n: NodeProto, producers: Dict[str, NodeProto], graph_nodes: Sequence[NodeProto],
               what: str) -> NodeProto:
    """ORT's GRUTraining/LSTMTraining as ONNX's GRU/LSTM (their saved gates dropped, which only their
    gradient node may read), and GRUGrad/LSTMGrad as pytrain's, which recompute the gates from the
    forward's inputs (LSTMGrad's bias and peepholes taken from its LSTMTraining)."""
    attrs = node_attributes(n)
    if n.op_type.endswith("Training"):
        onnx_op, kept = _RECURRENT[n.op_type]
        grad_op = onnx_op + "Grad"
        saved = {o for o in n.output[kept:] if o}
        readers = [m for m in graph_nodes if saved & set(m.input)]
        wrong = [m for m in readers if m.domain != MS or m.op_type != grad_op]
        if wrong:
            raise _refuse(what, "node %r (%s) reads the gates %s node %r saved, which only its %s may read"
                          % (wrong[0].name, wrong[0].op_type, n.op_type, n.name, grad_op))
        return make_node(onnx_op, list(n.input), list(n.output[:kept]), name=n.name, **attrs)
    forward_op, order = _RECURRENT[n.op_type]
    gates = n.input[7] if n.op_type == "GRUGrad" else (n.input[8] if len(n.input) > 8 else "")
    fwd = producers.get(gates)
    if fwd is None or fwd.domain != MS or fwd.op_type != forward_op or node_attributes(fwd) != attrs:
        raise _refuse(what, "%s node %r does not read the gates of a %s with its attributes"
                      % (n.op_type, n.name, forward_op))
    src = {"F": list(fwd.input), "G": list(n.input)}
    inputs = [src[k][i] if i < len(src[k]) else "" for k, i in order]
    return make_node(n.op_type, inputs, list(n.output), name=n.name, domain=PYTRAIN_DOMAIN, **attrs)


def from_ort_eval(model: ModelProto, params: Sequence[str], user_inputs: Sequence[str],
                  what: str = "eval model") -> ModelProto:
    """ORT's eval model (user inputs, then parameters; its outputs) with pytrain's eval layout;
    its user inputs must be the training model's."""
    user, _ = _split_inputs(model, params)
    if list(user) != list(user_inputs):
        raise _refuse(what, "it takes the inputs %s, the training model %s" % (user, list(user_inputs)))
    return _with_layout(model, "eval", {"user_inputs": user, "labels": [],
                                        "outputs": [o.name for o in model.graph.output]})


class OrtOptimizerSpec:
    """pytrain's update of ORT's optimizer node (what ``pytrain.device.api.build_optimizer_model`` takes):
    AdamWOptimizer as ``OrtAdamWStep`` (ORT's arithmetic, ``pytrain/ops/train/op_adamw_ort.py``, the
    node's attributes as they are), SGDOptimizerV2 as plain ``SGDStep``. ORT's first learning rate."""

    lr = 1e-3
    max_grad_norm = None

    def __init__(self, op_type: str, state_names: Tuple[str, ...], attributes: Dict[str, Any]) -> None:
        self.op_type, self.state_names, self._attributes = op_type, state_names, dict(attributes)

    def attributes(self) -> Dict[str, Any]:
        return dict(self._attributes)

    def describe(self) -> str:
        return "%s(%s)" % (self.op_type, ", ".join("%s=%.6g" % kv for kv in sorted(self._attributes.items())))


def ort_optimizer_spec(model: ModelProto, what: str = "optimizer model") -> Optional[OrtOptimizerSpec]:
    """pytrain's update for ORT's optimizer model: one com.microsoft AdamWOptimizer or SGDOptimizerV2
    node fed by the graph inputs ORT's Optimizer feeds; None for another model. Every attribute is
    read (ORT's schema defaults where absent); one pytrain does not know is refused, and so are the
    values ORT's node refuses."""
    nodes = list(model.graph.node)
    if len(nodes) != 1 or nodes[0].domain != MS or nodes[0].op_type not in _OPTIMIZER_INPUTS:
        return None
    n = nodes[0]
    fed = [v.name for v in model.graph.input]
    want = _OPTIMIZER_INPUTS[n.op_type]
    given = [i for i in n.input]
    while given and not given[-1]:
        given.pop()
    if len(given) != len(want) or any(i not in fed for i in given):
        raise _refuse(what, "its %s node takes %s; ORT's Optimizer feeds %s (an update_signal input is not fed)"
                      % (n.op_type, given, want))
    attrs = node_attributes(n)
    known = ADAMW_DEFAULTS if n.op_type == "AdamWOptimizer" else {}
    unknown = sorted(a for a in attrs if a not in known)
    if unknown:
        raise _refuse(what, "its %s node has attribute %s, which pytrain does not know" % (n.op_type, unknown[0]))
    if n.op_type == "SGDOptimizerV2":
        return OrtOptimizerSpec("SGDStep", (), {"momentum": 0.0, "dampening": 0.0, "nesterov": 0, "weight_decay": 0.0})
    a = dict(ADAMW_DEFAULTS, **attrs)
    if int(a["adam_mode"]) not in (0, 1) or (int(a["adam_mode"]) == 0 and not int(a["correct_bias"])):
        raise _refuse(what, "its AdamWOptimizer node has adam_mode=%r, correct_bias=%r; ORT runs adam_mode 0 "
                      "(with correct_bias 1) and 1" % (a["adam_mode"], a["correct_bias"]))
    return OrtOptimizerSpec("OrtAdamWStep", ("exp_avg", "exp_avg_sq"), {
        "alpha": float(a["alpha"]), "beta": float(a["beta"]), "epsilon": float(a["epsilon"]),
        "weight_decay": float(a["weight_decay"]), "adam_mode": int(a["adam_mode"]),
        "correct_bias": int(a["correct_bias"])})
