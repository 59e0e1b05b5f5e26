"""The offline phase: from an inference ONNX model, the four training artifacts
(training model, eval model, optimizer model, checkpoint), with ORT's ``generate_artifacts``."""
from __future__ import annotations

import enum
import json
import os
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from pytrain import dtypes
from pytrain.autodiff import build_gradients, grad_name
from pytrain.autodiff.engine import differentiable_inputs
from pytrain.blocks import Block, BuildContext
from pytrain.checkpoint import Parameter, encode
from pytrain.errors import ArtifactError
from pytrain.executor import unsupported_op_error
from pytrain.export import inference_rewrite
from pytrain.graph import NameScope, all_names, topological_order
from pytrain.losses import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss
from pytrain.ops import get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.layout import ARTIFACT_FILES, ARTIFACT_KEY, LAYOUT_KEY, LOSS_OUTPUT
from pytrain.trainable import classify_initializers
from pytrain.optim import SGD, Adam, AdamW, OptimType, OptimizerSpec, build_optimizer_model, resolve
from pytrain.proto import (ModelProto, NodeProto, ValueInfoProto, from_array, load_model, make_graph, make_model,
                           make_node, make_opsetid, make_value_info, opset_version, to_array, value_info_type,
                           write_atomic)

__all__ = ["Artifacts", "LossType", "OptimType", "SGD", "Adam", "AdamW", "generate_artifacts"]



class LossType(enum.Enum):
    """ORT's built-in losses (PyTorch semantics)."""

    MSELoss = "MSELoss"
    CrossEntropyLoss = "CrossEntropyLoss"
    BCEWithLogitsLoss = "BCEWithLogitsLoss"
    L1Loss = "L1Loss"


_LOSSES = {LossType.MSELoss: MSELoss, LossType.CrossEntropyLoss: CrossEntropyLoss,
           LossType.BCEWithLogitsLoss: BCEWithLogitsLoss, LossType.L1Loss: L1Loss}


class Artifacts:
    """The four artifacts as bytes (what ``generate_artifacts`` returns)."""

    FILES = tuple(ARTIFACT_FILES.values())

    def __init__(self, training_model: bytes, eval_model: bytes, optimizer_model: bytes,
                 checkpoint: bytes, summary: Dict[str, Any]) -> None:
        self.training_model = training_model
        self.eval_model = eval_model
        self.optimizer_model = optimizer_model
        self.checkpoint = checkpoint
        self.summary = summary

    def write(self, directory: Union[str, "os.PathLike[str]"], prefix: str = "") -> Dict[str, str]:
        """Write the four files (atomically each) and return their paths."""
        os.makedirs(directory, exist_ok=True)
        paths = {}
        for fname, data in zip(self.FILES, (self.training_model, self.eval_model,
                                            self.optimizer_model, self.checkpoint)):
            path = os.path.join(os.fspath(directory), prefix + fname)
            write_atomic(path, data)
            paths[fname] = path
        return paths


def _names_check(what: str, names: Optional[Sequence[str]], initializers: Dict[str, Any]) -> List[str]:
    names = list(names or [])
    for n in names:
        if n not in initializers:
            some = ", ".join(sorted(initializers)[:20]) + (" ..." if len(initializers) > 20 else "")
            raise ArtifactError("%s names %r, which is not an initializer of the model "
                                "(initializers: %s)" % (what, n, some or "none"))
    return names


def _frozen_by_exporter(src: ModelProto) -> List[str]:
    """Parameters ``pytrain.torch_export`` recorded as ``requires_grad=False`` in PyTorch (metadata
    ``pytrain.frozen_params``): frozen by default, as PyTorch would not train them."""
    from pytrain.torch_export import FROZEN_KEY  # imports no torch

    value = {p.key: p.value for p in src.metadata_props}.get(FROZEN_KEY)
    return [str(n) for n in json.loads(value)] if value else []


def _initializer_report(report: List[Dict[str, Any]], trainable: Sequence[str],
                        frozen_params: Optional[Sequence[str]], requires_grad: Optional[Sequence[str]],
                        trainable_ops: Optional[int], params: Sequence[str]) -> List[Dict[str, Any]]:
    """The default rule's verdict per initializer, overridden by what the caller asked for."""
    out = []
    for r in report:
        r = dict(r)
        name = r["name"]
        if name in trainable:
            if not r["trains"]:
                r["why"] = "named in requires_grad (by default it would not train: %s)" % r["why"]
            r["trains"] = True
        elif r["trains"] or (frozen_params is not None and name in frozen_params):
            if frozen_params is not None and name in frozen_params:
                r["why"] = "frozen by frozen_params"
            elif requires_grad is not None and name not in requires_grad:
                r["why"] = "not in requires_grad"
            elif trainable_ops is not None:
                r["why"] = "frozen by trainable_ops=%d (not among the last %d layers)" % (trainable_ops, trainable_ops)
            else:
                r["why"] = "frozen (recorded as requires_grad=False by pytrain.torch_export)"
            r["trains"] = False
        r["state"] = name in params  # kept in the checkpoint (trained, frozen or running statistics)
        out.append(r)
    return out


def _last_layers(nodes: Sequence[NodeProto], candidates: Sequence[str], count: int) -> List[str]:
    """Parameters of the last ``count`` ops that hold parameters (ONERT's num_of_trainable_ops)."""
    layers = [[i for i in n.input if i in candidates] for n in nodes]
    layers = [l for l in layers if l]
    chosen: List[str] = []
    for layer in layers[len(layers) - count:] if count > 0 else []:
        chosen.extend(p for p in layer if p not in chosen)
    return chosen


BATCHNORM_MODES = ("auto", "train", "eval")


def _carried(nodes: Sequence[NodeProto], trainable: Sequence[str]) -> set:
    """Tensors a gradient reaches from the trainable parameters (differentiable paths only)."""
    carries = set(trainable)
    for n in nodes:
        if any(n.input[i] in carries for i in differentiable_inputs(n) if i < len(n.input) and n.input[i]):
            carries.update(o for o in n.output if o)
    return carries


def _batchnorm_modes(nodes: Sequence[NodeProto], option: Any, trainable: Sequence[str]) -> Dict[int, str]:
    """{index of a BatchNormalization node: 'train' or 'eval'} for the training model.

    'auto' (the rule): a BatchNormalization whose scale or bias trains uses the batch's statistics
    and updates its running statistics (as a PyTorch module in train()); one whose scale and bias
    both do not train (frozen, or not parameters) stays in inference mode on its running
    statistics, which do not change (as a frozen backbone in eval()). The gradient still flows
    through it to X. ``option`` is 'auto', 'train', 'eval', or a dict {node name or scale
    initializer name: 'auto'|'train'|'eval'} (nodes it does not name follow 'auto').
    """
    bns = [(i, n) for i, n in enumerate(nodes) if n.op_type == "BatchNormalization" and not n.domain]
    if isinstance(option, str) or option is None:
        per: Dict[str, str] = {}
        default = option or "auto"
    elif isinstance(option, dict):
        per, default = dict(option), "auto"
        names = {n.name for _, n in bns if n.name} | {n.input[1] for _, n in bns if len(n.input) > 1}
        unknown = sorted(k for k in per if k not in names)
        if unknown:
            raise ArtifactError("batchnorm names %s, which is no BatchNormalization node or scale initializer "
                                "of the model (BatchNormalization nodes: %s)" % (
                                    ", ".join(repr(k) for k in unknown),
                                    ", ".join(repr(n.name or n.output[0]) for _, n in bns) or "none"))
    else:
        raise ArtifactError("batchnorm must be 'auto', 'train', 'eval' or a dict {node or scale name: mode}, got %r"
                            % (option,))
    for mode in [default] + list(per.values()):
        if mode not in BATCHNORM_MODES:
            raise ArtifactError("batchnorm mode %r is not one of %s" % (mode, ", ".join(BATCHNORM_MODES)))
    carries = _carried(nodes, trainable)
    modes: Dict[int, str] = {}
    for i, n in bns:
        mode = per.get(n.name, per.get(n.input[1], default)) if n.name or len(n.input) > 1 else default
        if mode == "auto":
            mode = "train" if any(x in carries for x in n.input[1:3]) else "eval"
        modes[i] = mode
    return modes


def _training_rewrite(nodes: List[NodeProto], scope: NameScope, params: Sequence[str],
                      add_const: Any, bn_modes: Dict[int, str]) -> Dict[str, str]:
    """Switch nodes to training behaviour; returns {state update output: buffer it replaces}.

    A BatchNormalization in 'train' mode becomes BatchNormTraining (batch statistics, running
    stats updated as torch does); one in 'eval' mode runs on its running statistics (the
    training_mode attribute of the source is dropped; running-stat outputs a training-mode export
    declared pass the statistics through unchanged). Dropout gets training_mode = true.
    """
    updates: Dict[str, str] = {}
    passthrough: List[NodeProto] = []
    for idx, n in enumerate(nodes):
        if n.op_type == "BatchNormalization" and not n.domain and bn_modes.get(idx) == "eval":
            declared = list(n.output)
            inference_rewrite(n)
            for k, stat in ((1, 3), (2, 4)):
                if k < len(declared) and declared[k]:
                    passthrough.append(make_node("Identity", [n.input[stat]], [declared[k]],
                                                 name=scope.fresh("%s/frozen_stat%d" % (n.name or declared[0], k))))
        elif n.op_type == "BatchNormalization" and not n.domain:
            attrs = {a.name: a for a in n.attribute}
            eps = attrs["epsilon"].f if "epsilon" in attrs else 1e-5
            momentum = attrs["momentum"].f if "momentum" in attrs else 0.9
            base = n.name or n.output[0]
            # keep the names of running-stat outputs a TRAINING-mode export already declares
            outs = [n.output[0]] + [n.output[k] if k < len(n.output) and n.output[k] else
                                    scope.fresh("%s/%s" % (base, s)) for k, s in
                                    ((1, "running_mean"), (2, "running_var"), (3, "saved_mean"), (4, "saved_invstd"))]
            mean, var = n.input[3], n.input[4]
            if mean in params:
                updates[outs[1]] = mean
            if var in params:
                updates[outs[2]] = var
            nodes[idx] = make_node("BatchNormTraining", list(n.input[:5]), outs, name=n.name,
                                   domain=PYTRAIN_DOMAIN, epsilon=float(eps), momentum=float(momentum))
        elif n.op_type == "Dropout" and not n.domain:
            ins = list(n.input) + [""] * (3 - len(n.input))
            ins[2] = add_const(np.array(True), "dropout_training_mode")
            del n.input[:]
            n.input.extend(ins)
    nodes.extend(passthrough)
    return updates


def generate_artifacts(
    model: Any,
    requires_grad: Optional[Sequence[str]] = None,
    frozen_params: Optional[Sequence[str]] = None,
    loss: Union[LossType, Block, str, None] = LossType.CrossEntropyLoss,
    optimizer: Optional[OptimizerSpec] = OptimType.AdamW,
    artifact_directory: Union[str, "os.PathLike[str]", None] = None,
    prefix: str = "",
    additional_output_names: Optional[Sequence[str]] = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Optional[Sequence[str]] = None,
    trainable_ops: Optional[int] = None,
    loss_reduction: str = "mean",
    batchnorm: Union[str, Dict[str, str]] = "auto",
    external_data: Optional[Dict[str, bytes]] = None,
    allow_no_trainable: bool = False,
    input_grads: Sequence[str] = (),
) -> Artifacts:
    """Build the training, eval and optimizer models and the checkpoint from an inference model.

    model: a path, bytes, or an ``onnx``/pytrain ModelProto. Tensors kept in ONNX external data
        (``m.onnx.data``, torch's default exporter) load from the model's folder for a path, from
        ``external_data`` ({location: bytes}) otherwise.
    requires_grad: initializers to train. None: the model's parameters, what PyTorch trains, by the
        rule of :mod:`pytrain.trainable` (weights of Conv/Gemm/MatMul/normalizations/embeddings,
        also through Transpose/Reshape/Cast copies; not buffers, integer tensors, rank-0 scalars or
        constants the exporter folded, e.g. ``val_68`` or ``/attn/Sqrt_output_0`` feeding only
        arithmetic). ``summary["initializers"]`` says for each initializer whether it trains and why.
    frozen_params: initializers kept in the checkpoint but not trained.
    loss: a LossType, a Block (custom loss composed from pytrain.blocks), or None when the model's
        first output already is the loss.
    optimizer: OptimType or an SGD/Adam/AdamW object carrying hyper-parameters (PyTorch's defaults).
    artifact_directory: where to write the four files (prefix prepended); None writes nothing.
    additional_output_names: model outputs to return next to the loss (e.g. logits).
    nominal_checkpoint: store parameter shapes only (fill them at run time).
    loss_input_names: model outputs fed to the loss (default: the first output; all outputs for a custom Block).
    trainable_ops: only the parameters of the last N ops that hold parameters train (as ONERT's
        num_of_trainable_ops); the others are frozen.
    loss_reduction: 'mean', 'sum' or 'none' for the built-in losses.
    batchnorm: how each BatchNormalization runs in the training model. 'auto' (default): one whose
        scale or bias trains uses the batch's statistics and updates its running statistics (a
        PyTorch module in train()); one whose scale and bias both do not train (frozen by
        requires_grad / frozen_params / trainable_ops, or not initializers) runs on its running
        statistics, which stay unchanged, as a frozen backbone in eval() does; the gradient still
        flows through it to its input. 'train' / 'eval' force one mode for every node; a dict
        {node name or scale initializer name: 'auto'|'train'|'eval'} sets it per node. The
        training_mode attribute of the source model does not matter. The eval model always uses
        the running statistics.
    external_data: {location: bytes} of the external-data files when ``model`` is bytes or a ModelProto.
    allow_no_trainable: accept a model where no parameter trains (the training model then computes
        the loss and any input gradients only) instead of refusing it.
    input_grads: graph inputs whose gradient the training model also outputs (as ``<input>_grad``).
    """
    src = load_model(model, external_data=external_data)
    src = ModelProto.FromString(src.SerializeToString())  # work on a private copy
    g = src.graph
    opset = opset_version(src)
    if opset == 0:
        raise ArtifactError("the model imports no default-domain (ai.onnx) opset")
    for n in g.node:
        if get_kernel(n.op_type, n.domain or "") is None:
            raise unsupported_op_error(n)
    inits = OrderedDict((t.name, t) for t in g.initializer)
    user_inputs = [v for v in g.input if v.name not in inits]
    nodes = topological_order(list(g.node), [v.name for v in user_inputs] + list(inits))

    # ---- which initializers train, which are frozen, which are running statistics -------------
    frozen = _names_check("frozen_params", frozen_params, inits)
    if frozen_params is None and requires_grad is None:
        frozen = [p for p in _frozen_by_exporter(src) if p in inits]
    if requires_grad is not None:
        trainable = _names_check("requires_grad", requires_grad, inits)
        for p in trainable:
            if not dtypes.is_float(inits[p].data_type):
                raise ArtifactError("requires_grad names %r, an initializer of type %s; only float tensors train"
                                    % (p, dtypes.NAMES.get(inits[p].data_type, "?")))
        overlap = sorted(set(trainable) & set(frozen))
        if overlap:
            raise ArtifactError("requires_grad and frozen_params both name %s: a parameter either trains or is frozen"
                                % ", ".join(repr(p) for p in overlap))
    report = classify_initializers(nodes, list(inits.values()), list(g.value_info) + list(g.input))
    if requires_grad is None:
        # the model's parameters (pytrain.trainable's rule), in the order the graph first reads them
        by_rule = {r["name"] for r in report if r["trains"]}
        order = [i for n in nodes for i in n.input if i in by_rule] + [r["name"] for r in report]
        trainable = [p for p in OrderedDict.fromkeys(order) if p in by_rule and p not in frozen]
    if trainable_ops is not None:
        if int(trainable_ops) < 1:
            raise ArtifactError("trainable_ops must be at least 1, got %r" % (trainable_ops,))
        last = _last_layers(nodes, trainable, int(trainable_ops))
        frozen = frozen + [p for p in trainable if p not in last]
        trainable = last
    if not trainable and not allow_no_trainable:
        raise ArtifactError("no parameter would train: the model has no float initializer feeding a "
                            "differentiable input%s" % (" among requires_grad" if requires_grad is not None else ""))
    buffers = []
    for n in nodes:
        if n.op_type == "BatchNormalization" and not n.domain:
            buffers.extend(b for b in n.input[3:5] if b in inits and b not in trainable and b not in frozen)
    params = trainable + [p for p in frozen if p not in trainable] + [b for b in buffers if b not in frozen]
    constants = [t for name, t in inits.items() if name not in params]
    bn_modes = _batchnorm_modes(nodes, batchnorm, trainable)

    outputs = [o.name for o in g.output]
    produced = {o for n in nodes for o in n.output} | {v.name for v in g.input}
    extra = list(additional_output_names or [])
    for name in extra:
        if name not in produced:
            raise ArtifactError("additional_output_names names %r, which no node or input of the model produces "
                                "(graph outputs: %s)" % (name, ", ".join(outputs)))
    if loss_input_names is not None:
        for name in loss_input_names:
            if name not in produced:
                raise ArtifactError("loss_input_names names %r, which the model does not produce (graph outputs: %s)"
                                    % (name, ", ".join(outputs)))

    taken = all_names(g)
    scope = NameScope(taken | {LOSS_OUTPUT})
    # the loss output is 'loss' (ORT's name) unless the model already has a tensor of that name
    loss_out = scope.fresh(LOSS_OUTPUT) if LOSS_OUTPUT in taken else LOSS_OUTPUT
    known = list(g.input) + list(g.output) + list(g.value_info)

    # ---- the loss, shared by the training and eval graphs --------------------------------------
    ctx = BuildContext(scope, known, opset)
    with ctx:
        if loss is None:
            loss_name = (loss_input_names or outputs)[0]
        else:
            if isinstance(loss, str):
                try:
                    loss = LossType(loss)
                except ValueError:
                    raise ArtifactError("unknown loss %r: use one of %s or a pytrain.blocks.Block"
                                        % (loss, ", ".join(t.value for t in LossType))) from None
            if isinstance(loss, LossType):
                block = _LOSSES[loss](reduction=loss_reduction)
                loss_name = block(*(loss_input_names or outputs[:1]))
            elif isinstance(loss, Block):
                loss_name = loss(*(loss_input_names or outputs))
            else:
                raise ArtifactError("loss must be a LossType, a pytrain.blocks.Block or None, got %r" % (loss,))
        if loss is None and loss_name == LOSS_OUTPUT:  # the model's output already is "loss"
            loss_out = LOSS_OUTPUT
        else:
            ctx.op("Identity", loss_name, out_names=[loss_out])
    loss_nodes, loss_consts, label_inputs = ctx.nodes, ctx.initializer_protos(), ctx.new_inputs

    param_inputs = [make_value_info(p, inits[p].data_type, list(inits[p].dims)) for p in params]
    inputs = user_inputs + label_inputs + param_inputs
    known_vi = {v.name: v for v in known}

    def vi(name: str) -> Any:
        """The model's declared type of ``name``, else an untyped entry (the runtime knows it)."""
        return known_vi.get(name) or ValueInfoProto(name=name)  # no type: ONNX allows it, UNDEFINED (0) it does not

    # ---- eval model: forward (inference semantics) + loss -------------------------------------
    eval_nodes = [NodeProto.FromString(n.SerializeToString()) for n in nodes]
    for n in eval_nodes:
        inference_rewrite(n)
    eval_nodes += loss_nodes
    layout = {"user_inputs": [v.name for v in user_inputs], "labels": [v.name for v in label_inputs],
              "trainable": trainable, "frozen": [p for p in params if p not in trainable],
              "outputs": [loss_out] + extra, "model_outputs": outputs}
    opsets = [make_opsetid("", opset), make_opsetid(PYTRAIN_DOMAIN, 1)] + [
        o for o in src.opset_import if o.domain not in ("", "ai.onnx", PYTRAIN_DOMAIN)]
    eval_graph = make_graph(eval_nodes, (g.name or "model") + "_eval", inputs,
                            [vi(loss_out)] + [vi(e) for e in extra], constants + loss_consts,
                            # the model's declared outputs stay known (export needs their types)
                            value_info=list(g.value_info) + [o for o in g.output
                                                             if o.name not in extra and o.name != loss_out])
    eval_model = make_model(eval_graph, opsets, ir_version=src.ir_version or None,
                            metadata={ARTIFACT_KEY: "eval", LAYOUT_KEY: json.dumps(layout)})

    # ---- training model: forward (training semantics) + loss + gradients -----------------------
    train_nodes = [NodeProto.FromString(n.SerializeToString()) for n in nodes]
    extra_consts: Dict[str, np.ndarray] = {}

    def add_const(value: np.ndarray, hint: str) -> str:
        name = scope.fresh(hint)
        extra_consts[name] = value
        return name

    updates = _training_rewrite(train_nodes, scope, params, add_const, bn_modes)
    train_nodes += [NodeProto.FromString(n.SerializeToString()) for n in loss_nodes]
    available = [v.name for v in inputs] + [t.name for t in constants + loss_consts] + list(extra_consts)
    input_vi = {v.name: v for v in user_inputs}
    for name in input_grads:
        if name not in input_vi:
            raise ArtifactError("input_grads names %r, which is not a graph input of the model (inputs: %s)"
                                % (name, ", ".join(input_vi) or "none"))
    grads = build_gradients(train_nodes, available, loss_out, list(trainable) + list(input_grads), scope)
    train_consts = constants + loss_consts + [from_array(v, k) for k, v in extra_consts.items()] + \
        grads.initializer_protos()
    train_outputs = [vi(loss_out)] + [vi(e) for e in extra] + \
        [make_value_info(grad_name(p), inits[p].data_type, list(inits[p].dims)) for p in trainable] + \
        [make_value_info(u, inits[b].data_type, list(inits[b].dims)) for u, b in updates.items()] + \
        [make_value_info(grad_name(i), *value_info_type(input_vi[i])) for i in input_grads]
    layout_t = dict(layout, state_updates=updates, grads=[grad_name(p) for p in trainable])
    if input_grads:
        layout_t["input_grads"] = list(input_grads)
    train_graph = make_graph(train_nodes + grads.nodes, (g.name or "model") + "_training", inputs,
                             train_outputs, train_consts, value_info=list(g.value_info))
    training_model = make_model(train_graph, opsets, ir_version=src.ir_version or None,
                                metadata={ARTIFACT_KEY: "training", LAYOUT_KEY: json.dumps(layout_t)})

    # ---- optimizer model and checkpoint ----------------------------------------------------------
    opt = resolve(optimizer if optimizer is not None else OptimType.AdamW)
    shapes = {p: [int(d) for d in inits[p].dims] for p in params}
    types = {p: inits[p].data_type for p in params}
    optimizer_model = build_optimizer_model(opt, trainable, shapes, types, opset)
    ck_params: "OrderedDict[str, Parameter]" = OrderedDict()
    for p in params:
        data = None if nominal_checkpoint else to_array(inits[p], "the model's initializers")
        ck_params[p] = Parameter(p, data, p in trainable, tuple(shapes[p]), dtypes.to_numpy(types[p]))
    checkpoint = encode(ck_params, {}, None)

    op_hist: Dict[str, int] = {}
    for n in nodes:
        op_hist[n.op_type] = op_hist.get(n.op_type, 0) + 1
    count = lambda names: int(sum(int(np.prod(shapes[p])) for p in names))  # noqa: E731
    summary = {"trainable": trainable, "frozen": [p for p in params if p not in trainable],
               "trainable_count": count(trainable),
               "frozen_count": count([p for p in params if p not in trainable]),
               "ops": op_hist, "optimizer": opt.describe(), "labels": layout["labels"],
               "inputs": layout["user_inputs"], "opset": opset,
               "initializers": _initializer_report(report, trainable, frozen_params, requires_grad,
                                                   trainable_ops, params),
               "batchnorm": {(nodes[i].name or nodes[i].output[0]): m for i, m in sorted(bn_modes.items())}}
    arts = Artifacts(training_model.SerializeToString(), eval_model.SerializeToString(),
                     optimizer_model.SerializeToString(), checkpoint, summary)
    if artifact_directory is not None:
        arts.write(artifact_directory, prefix)
    return arts
