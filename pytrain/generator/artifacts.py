"""The offline phase: from an inference ONNX model, the four training artifacts
(training model, eval model, optimizer model, checkpoint), with ORT's ``generate_artifacts`` name and
pytrain's defaults (PyTorch's optimizers). ``pytrain.ort.artifacts`` is the same generator with ORT's
arguments and defaults, for code that imported ``onnxruntime.training.artifacts``."""
from __future__ import annotations

import enum
import json
import os
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from pytrain.base import dtypes
from pytrain.autodiff import build_gradients
from pytrain.autodiff.gelu_forms import fuse_gelu
from pytrain.autodiff.quant_forms import refuse_trained_quant_params
from pytrain.autodiff.training_forms import batchnorm_modes, training_rewrite
from pytrain.generator.blocks import Block, BuildContext
from pytrain.checkpoint import Parameter, encode
from pytrain.errors import ArtifactError
from pytrain.engine.executor import unsupported_op_error
from pytrain.engine.export import inference_rewrite
from pytrain.engine.graph import NameScope, all_names, topological_order
from pytrain.engine.lora import PROPERTY as LORA_PROPERTY, LAYOUT_KEY as LORA_LAYOUT_KEY, LoRA, insert_adapters
from pytrain.generator.losses import BCEWithLogitsLoss, CausalLMLoss, CrossEntropyLoss, L1Loss, MSELoss
from pytrain.ops import get_kernel
from pytrain.ops.control.subgraph import all_nodes
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.base.layout import ARTIFACT_FILES, ARTIFACT_KEY, LAYOUT_KEY, LOSS_OUTPUT, grad_name
from pytrain.generator.trainable import classify_initializers, tie_exporter_copies, why_nothing_trains
from pytrain.generator.optim import SGD, Adam, AdamW, OptimType, OptimizerSpec, build_optimizer_model, resolve
from pytrain.proto import (ModelProto, NodeProto, ValueInfoProto, from_array, make_graph, make_model,
                           make_opsetid, make_value_info, opset_version, to_array, value_info_type,
                           write_atomic)
from pytrain.proto.message import sharing
from pytrain.engine.validate import load_model
from pytrain.generator.normalize import normalize_for_training, refuse_gradient_through
from pytrain.generator.options import GenerateOptions

__all__ = ["Artifacts", "GenerateOptions", "LoRA", "LossType", "OptimType", "SGD", "Adam", "AdamW",
           "generate_artifacts"]


class LossType(enum.Enum):
    """ORT's built-in losses (PyTorch semantics)."""

    MSELoss = "MSELoss"
    CrossEntropyLoss = "CrossEntropyLoss"
    BCEWithLogitsLoss = "BCEWithLogitsLoss"
    L1Loss = "L1Loss"
    CausalLMLoss = "CausalLMLoss"   # next-token cross-entropy from the logits and the model's input_ids


_LOSSES = {LossType.MSELoss: MSELoss, LossType.CrossEntropyLoss: CrossEntropyLoss,
           LossType.BCEWithLogitsLoss: BCEWithLogitsLoss, LossType.L1Loss: L1Loss, LossType.CausalLMLoss: CausalLMLoss}


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
    from pytrain.generator.torch_export import FROZEN_KEY  # imports no torch

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


class _ParameterPlan:
    """What the source model holds and how each of its initializers serves training."""

    __slots__ = ("src", "opset", "inits", "user_inputs", "nodes", "report", "trainable", "frozen", "params",
                 "constants", "bn_modes", "lora", "tied")

    def __init__(self, src: ModelProto, opset: int, inits: "OrderedDict[str, Any]", user_inputs: List[Any],
                 nodes: List[NodeProto]) -> None:
        self.src, self.opset, self.inits, self.user_inputs, self.nodes = src, opset, inits, user_inputs, nodes
        self.report: List[Dict[str, Any]] = []
        self.trainable: List[str] = []
        self.frozen: List[str] = []
        self.params: List[str] = []     # what the checkpoint keeps: trainable, frozen, running statistics
        self.constants: List[Any] = []  # the other initializers, kept in the models
        self.bn_modes: Dict[int, str] = {}
        self.lora: Dict[str, Any] = {}  # LoRA settings and adapter table (pytrain.lora), when adapters were added
        self.tied: List[Dict[str, str]] = []  # exporter copies of a tied weight, made Transposes of it

    def shape(self, p: str) -> List[int]:
        return [int(d) for d in self.inits[p].dims]

    def value_info(self, p: str, name: Optional[str] = None) -> ValueInfoProto:
        """Typed like initializer ``p`` (its gradient, its running-statistic update)."""
        return make_value_info(name or p, self.inits[p].data_type, list(self.inits[p].dims))


def _source(model: Any, external_data: Optional[Dict[str, bytes]]) -> _ParameterPlan:
    """The model read, checked for kernels, its nodes in topological order."""
    src = load_model(model, external_data=external_data)
    # work on a private copy, whose weights are the source's very bytes (immutable): not held twice
    with sharing(t.raw_data for t in src.graph.initializer if t.HasField("raw_data")):
        src = ModelProto.FromString(src.SerializeToString())
    g = src.graph
    opset = opset_version(src)
    if opset == 0:
        raise ArtifactError("the model imports no default-domain (ai.onnx) opset")
    normalize_for_training(src)  # what converters write, as pytrain's rules mean it (pytrain/normalize)
    for n in all_nodes(g):  # the bodies of If/Loop/Scan too
        if get_kernel(n.op_type, n.domain or "") is None:
            raise unsupported_op_error(n)
    inits = OrderedDict((t.name, t) for t in g.initializer)
    user_inputs = [v for v in g.input if v.name not in inits]
    nodes = topological_order(list(g.node), [v.name for v in user_inputs] + list(inits))
    return _ParameterPlan(src, opset, inits, user_inputs, nodes)


def _add_lora(plan: _ParameterPlan, lora: Optional[LoRA], requires_grad: Optional[Sequence[str]],
              trainable_ops: Optional[int]) -> Optional[Sequence[str]]:
    """Insert the LoRA adapters (:mod:`pytrain.lora`) and return what trains: the adapters, with any
    initializer ``requires_grad`` adds (as peft's ``modules_to_save``); everything else is frozen."""
    if lora is None:
        return requires_grad
    if not isinstance(lora, LoRA):
        raise ArtifactError("lora must be a pytrain.engine.lora.LoRA, got %r" % (lora,))
    if trainable_ops is not None:
        raise ArtifactError("lora and trainable_ops both choose what trains: with LoRA only the adapters "
                            "(and requires_grad) train")
    extra = _names_check("requires_grad", requires_grad, plan.inits)
    table = insert_adapters(plan.src, lora)
    g = plan.src.graph
    plan.inits = OrderedDict((t.name, t) for t in g.initializer)
    plan.nodes = topological_order(list(g.node), [v.name for v in plan.user_inputs] + list(plan.inits))
    plan.lora = dict(lora.describe(), adapters=table)
    return [n for a in table for n in (a["lora_A"], a["lora_B"])] + [p for p in extra]


def _tie(plan: _ParameterPlan, named: Sequence[Optional[Sequence[str]]]) -> None:
    """A tied weight's transposed copy, which an exporter wrote as an initializer, read from the weight
    again (:func:`pytrain.generator.trainable.tie_exporter_copies`), unless the caller named the copy."""
    plan.tied = tie_exporter_copies(plan.src.graph, keep=[p for names in named for p in names or ()])
    if plan.tied:
        plan.inits = OrderedDict((t.name, t) for t in plan.src.graph.initializer)
        plan.nodes = topological_order(list(plan.src.graph.node), [v.name for v in plan.user_inputs] + list(plan.inits))


def _plan_parameters(plan: _ParameterPlan, requires_grad: Optional[Sequence[str]],
                     frozen_params: Optional[Sequence[str]], trainable_ops: Optional[int],
                     allow_no_trainable: bool, batchnorm: Any) -> None:
    """Which initializers train, which are frozen, which are running statistics, and how each
    BatchNormalization runs."""
    inits, nodes, g = plan.inits, plan.nodes, plan.src.graph
    frozen = _names_check("frozen_params", frozen_params, inits)
    if frozen_params is None and requires_grad is None:
        frozen = [p for p in _frozen_by_exporter(plan.src) if p in inits]
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
        raise ArtifactError(why_nothing_trains(report, requires_grad is not None, frozen))
    buffers = []
    for n in nodes:
        if n.op_type == "BatchNormalization" and not n.domain:
            buffers.extend(b for b in n.input[3:5] if b in inits and b not in trainable and b not in frozen)
    plan.report, plan.trainable, plan.frozen = report, trainable, frozen
    plan.params = trainable + [p for p in frozen if p not in trainable] + [b for b in buffers if b not in frozen]
    plan.constants = [t for name, t in inits.items() if name not in plan.params]
    plan.bn_modes = batchnorm_modes(nodes, batchnorm, trainable)
    refuse_trained_quant_params(nodes, trainable)
    # control flow the generator could not unroll (pytrain/normalize) reading what would train
    refuse_gradient_through(nodes, trainable, [t for t, i in inits.items() if dtypes.is_float(i.data_type)
                                               and t not in (frozen_params or ()) and requires_grad is None])


class _Loss:
    """The loss nodes (shared by the training and eval models), what they add, and the graphs' inputs."""

    __slots__ = ("scope", "output", "extra", "model_outputs", "nodes", "consts", "labels", "inputs", "known")

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self, k, v)

    def value_info(self, name: str) -> ValueInfoProto:
        """The model's declared type of ``name``, else an untyped entry (the runtime knows it)."""
        return self.known.get(name) or ValueInfoProto(name=name)  # no type: ONNX allows it, UNDEFINED (0) it does not


def _build_loss(plan: _ParameterPlan, loss: Any, loss_input_names: Optional[Sequence[str]], loss_reduction: str,
                additional_output_names: Optional[Sequence[str]]) -> _Loss:
    g = plan.src.graph
    outputs = [o.name for o in g.output]
    produced = {o for n in plan.nodes for o in n.output} | {v.name for v in g.input}
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
    ctx = BuildContext(scope, known, plan.opset)
    with ctx:
        if loss is None:
            loss_name = (loss_input_names or outputs)[0]
        else:
            if isinstance(loss, str):
                try:
                    loss = LossType(loss)
                except ValueError:
                    raise ArtifactError("unknown loss %r: use one of %s or a pytrain.generator.blocks.Block"
                                        % (loss, ", ".join(t.value for t in LossType))) from None
            if isinstance(loss, LossType):
                block = _LOSSES[loss](reduction=loss_reduction)
                loss_name = block(*(loss_input_names or outputs[:1]))
            elif isinstance(loss, Block):
                loss_name = loss(*(loss_input_names or outputs[:loss.outputs_taken(len(outputs))]))
            else:
                raise ArtifactError("loss must be a LossType, a pytrain.generator.blocks.Block or None, got %r" % (loss,))
        if loss is None and loss_name == LOSS_OUTPUT:  # the model's output already is "loss"
            loss_out = LOSS_OUTPUT
        else:
            ctx.op("Identity", loss_name, out_names=[loss_out])
    param_inputs = [plan.value_info(p) for p in plan.params]
    return _Loss(scope=scope, output=loss_out, extra=extra, model_outputs=outputs, nodes=ctx.nodes,
                 consts=ctx.initializer_protos(), labels=ctx.new_inputs,
                 inputs=plan.user_inputs + ctx.new_inputs + param_inputs, known={v.name: v for v in known})


def _opsets(plan: _ParameterPlan) -> List[Any]:
    return [make_opsetid("", plan.opset), make_opsetid(PYTRAIN_DOMAIN, 1)] + [
        o for o in plan.src.opset_import if o.domain not in ("", "ai.onnx", PYTRAIN_DOMAIN)]


def _eval_model(plan: _ParameterPlan, lo: _Loss) -> Tuple[ModelProto, Dict[str, Any]]:
    """Forward (inference semantics) + loss; returns the model and its layout."""
    g = plan.src.graph
    eval_nodes = [NodeProto.FromString(n.SerializeToString()) for n in plan.nodes]
    for n in eval_nodes:
        inference_rewrite(n)
    eval_nodes += lo.nodes
    layout = {"user_inputs": [v.name for v in plan.user_inputs], "labels": [v.name for v in lo.labels],
              "trainable": plan.trainable, "frozen": [p for p in plan.params if p not in plan.trainable],
              "outputs": [lo.output] + lo.extra, "model_outputs": lo.model_outputs}
    if plan.lora:
        layout[LORA_LAYOUT_KEY] = plan.lora["adapters"]
    if plan.tied:
        layout["tied"] = plan.tied  # for pytrain inspect: the exporter copies that became Transposes
    eval_graph = make_graph(eval_nodes, (g.name or "model") + "_eval", lo.inputs,
                            [lo.value_info(lo.output)] + [lo.value_info(e) for e in lo.extra],
                            plan.constants + lo.consts,
                            # the model's declared outputs stay known (export needs their types)
                            value_info=list(g.value_info) + [o for o in g.output
                                                             if o.name not in lo.extra and o.name != lo.output])
    model = make_model(eval_graph, _opsets(plan), ir_version=plan.src.ir_version or None,
                       metadata={ARTIFACT_KEY: "eval", LAYOUT_KEY: json.dumps(layout)})
    return model, layout


def _training_model(plan: _ParameterPlan, lo: _Loss, layout: Dict[str, Any], input_grads: Sequence[str]) -> ModelProto:
    """Forward (training semantics) + loss + gradients, with the running statistics' updates."""
    g = plan.src.graph
    train_nodes = [NodeProto.FromString(n.SerializeToString()) for n in plan.nodes]
    extra_consts: Dict[str, np.ndarray] = {}

    def add_const(value: np.ndarray, hint: str) -> str:
        name = lo.scope.fresh(hint)
        extra_consts[name] = value
        return name

    updates = training_rewrite(train_nodes, lo.scope, plan.params, add_const, plan.bn_modes)
    train_nodes += [NodeProto.FromString(n.SerializeToString()) for n in lo.nodes]
    fuse_gelu(train_nodes, {t.name: t for t in plan.constants + lo.consts}, [lo.output] + lo.extra, lo.scope.fresh)
    available = [v.name for v in lo.inputs] + [t.name for t in plan.constants + lo.consts] + list(extra_consts)
    input_vi = {v.name: v for v in plan.user_inputs}
    for name in input_grads:
        if name not in input_vi:
            raise ArtifactError("input_grads names %r, which is not a graph input of the model (inputs: %s)"
                                % (name, ", ".join(input_vi) or "none"))
    grads = build_gradients(train_nodes, available, lo.output, list(plan.trainable) + list(input_grads), lo.scope)
    train_consts = plan.constants + lo.consts + [from_array(v, k) for k, v in extra_consts.items()] + \
        grads.initializer_protos()
    train_outputs = [lo.value_info(lo.output)] + [lo.value_info(e) for e in lo.extra] + \
        [plan.value_info(p, grad_name(p)) for p in plan.trainable] + \
        [plan.value_info(b, u) for u, b in updates.items()] + \
        [make_value_info(grad_name(i), *value_info_type(input_vi[i])) for i in input_grads]
    layout_t = dict(layout, state_updates=updates, grads=[grad_name(p) for p in plan.trainable])
    if input_grads:
        layout_t["input_grads"] = list(input_grads)
    train_graph = make_graph(train_nodes + grads.nodes, (g.name or "model") + "_training", lo.inputs,
                             train_outputs, train_consts, value_info=list(g.value_info))
    return make_model(train_graph, _opsets(plan), ir_version=plan.src.ir_version or None,
                      metadata={ARTIFACT_KEY: "training", LAYOUT_KEY: json.dumps(layout_t)})


def _optimizer_and_checkpoint(plan: _ParameterPlan, opt: OptimizerSpec, nominal: bool) -> Tuple[ModelProto, bytes]:
    shapes = {p: plan.shape(p) for p in plan.params}
    types = {p: plan.inits[p].data_type for p in plan.params}
    optimizer_model = build_optimizer_model(opt, plan.trainable, shapes, types, plan.opset)
    ck_params: "OrderedDict[str, Parameter]" = OrderedDict()
    for p in plan.params:
        data = None if nominal else to_array(plan.inits[p], "the model's initializers")
        ck_params[p] = Parameter(p, data, p in plan.trainable, tuple(shapes[p]), dtypes.to_numpy(types[p]))
    properties = {LORA_PROPERTY: json.dumps(plan.lora)} if plan.lora else {}
    return optimizer_model, encode(ck_params, properties, None)


def _summary(plan: _ParameterPlan, layout: Dict[str, Any], opt: OptimizerSpec,
             requested: Tuple[Optional[Sequence[str]], Optional[Sequence[str]], Optional[int]]) -> Dict[str, Any]:
    """What ``generate_artifacts`` decided, for people (``Artifacts.summary``); ``requested`` is
    (frozen_params, requires_grad, trainable_ops) as the caller passed them."""
    nodes, trainable = plan.nodes, plan.trainable
    frozen = [p for p in plan.params if p not in trainable]
    op_hist: Dict[str, int] = {}
    for n in nodes:
        op_hist[n.op_type] = op_hist.get(n.op_type, 0) + 1
    count = lambda names: int(sum(int(np.prod(plan.shape(p))) for p in names))  # noqa: E731
    frozen_params, requires_grad, trainable_ops = requested
    return {"trainable": trainable, "frozen": frozen,
            "trainable_count": count(trainable),
            "frozen_count": count(frozen),
            "ops": op_hist, "optimizer": opt.describe(), "labels": layout["labels"],
            "inputs": layout["user_inputs"], "opset": plan.opset,
            "initializers": _initializer_report(plan.report, trainable, frozen_params, requires_grad,
                                                trainable_ops, plan.params),
            "batchnorm": {(nodes[i].name or nodes[i].output[0]): m for i, m in sorted(plan.bn_modes.items())},
            "lora": plan.lora or None, "tied": plan.tied}


def generate_artifacts(
    model: Any,
    requires_grad: Optional[Sequence[str]] = None,
    frozen_params: Optional[Sequence[str]] = None,
    loss: Union[LossType, Block, str, None] = LossType.CrossEntropyLoss,
    optimizer: Optional[OptimizerSpec] = OptimType.AdamW,
    artifact_directory: Union[str, "os.PathLike[str]", None] = None,
    prefix: str = "",
    options: Optional[GenerateOptions] = None,
    **fields: Any,
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
        A tied weight's transposed copy that an exporter wrote as a second initializer (GPT-2's and
        T5's lm_head) is read from the weight again, so both train as one (``summary["tied"]``).
    frozen_params: initializers kept in the checkpoint but not trained.
    loss: a LossType, a Block (custom loss composed from pytrain.generator.blocks), or None when the model's
        first output already is the loss.
    optimizer: OptimType or an SGD/Adam/AdamW object carrying hyper-parameters (PyTorch's defaults).
    artifact_directory: where to write the four files (prefix prepended); None writes nothing.
    options: a :class:`GenerateOptions` (the rest: LoRA, batchnorm, extra outputs, ...), or its ``fields``
        by name (``generate_artifacts(m, lora=LoRA(8))``).
    """
    if options is not None and fields:
        raise TypeError("give generate_artifacts a GenerateOptions or its fields by name, not both")
    opts = options if options is not None else GenerateOptions(**fields)
    lora, trainable_ops = opts.lora, opts.trainable_ops
    plan = _source(model, opts.external_data)
    if lora is None:
        _tie(plan, (requires_grad, frozen_params))
    requires_grad = _add_lora(plan, lora, requires_grad, trainable_ops)
    _plan_parameters(plan, requires_grad, frozen_params, trainable_ops, opts.allow_no_trainable, opts.batchnorm)
    lo = _build_loss(plan, loss, opts.loss_input_names, opts.loss_reduction, opts.additional_output_names)
    eval_model, layout = _eval_model(plan, lo)
    training_model = _training_model(plan, lo, layout, opts.input_grads)
    opt = resolve(optimizer if optimizer is not None else OptimType.AdamW)
    optimizer_model, checkpoint = _optimizer_and_checkpoint(plan, opt, opts.nominal_checkpoint)
    summary = _summary(plan, layout, opt, (frozen_params, requires_grad, trainable_ops))
    arts = Artifacts(training_model.SerializeToString(), eval_model.SerializeToString(),
                     optimizer_model.SerializeToString(), checkpoint, summary)
    if artifact_directory is not None:
        arts.write(artifact_directory, prefix)
    return arts
