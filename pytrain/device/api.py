"""The training-phase API, with ONNX Runtime On-Device Training's names:
``CheckpointState``, ``Module``, ``Optimizer``, ``LinearLRScheduler``, and PyTorch's numbers (its
optimizers' arithmetic and defaults). ``pytrain.ort.api`` is the same surface with ORT's numbers and
defaults, for code that imported ``onnxruntime.training.api``."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from pytrain.base import dtypes
from pytrain.device import ort_made
from pytrain.checkpoint import CheckpointState, OptimizerState, Parameter
from pytrain.errors import DivergenceError, InputError, ModelFormatError
from pytrain.engine.executor import Plan
from pytrain.device.module import MemoryEstimate, Module, first_non_finite
from pytrain.base.layout import (ARTIFACT_KEY, DEFAULT_LR_KEY, LR_INPUT, OPTIMIZER_KEY, STATE_NAMES_KEY, STEP_INPUT,
                            default_lr, grad_name, state_name)
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto import (ModelProto, make_graph, make_model, make_node, make_opsetid, make_value_info,
                           model_metadata, opset_version)
from pytrain.engine.validate import load_model

__all__ = ["CheckpointState", "LinearLRScheduler", "MemoryEstimate", "Module", "Optimizer", "Parameter"]


class Optimizer:
    """Applies the optimizer model to a Module's parameters (ORT's ``Optimizer``).
    Its state (step count, moments) lives in the module's CheckpointState. ONNX Runtime's optimizer
    model (AdamWOptimizer, SGDOptimizerV2) is taken as it is: its node's update, every trainable
    parameter of ``module`` (:func:`pytrain.device.ort_made.ort_optimizer_spec`)."""

    def __init__(self, optimizer_uri: Any, module: Module) -> None:
        model = _optimizer_model(optimizer_uri, module)
        meta = model_metadata(model)
        if meta.get(ARTIFACT_KEY) != "optimizer":
            raise ModelFormatError("the optimizer model is not a pytrain optimizer artifact")
        self._module = module
        self._model = model
        state = module.state
        self._slots = [s for s in meta.get(STATE_NAMES_KEY, "").split(",") if s]
        params = [v.name for v in model.graph.input][2:][::2 + len(self._slots)]
        missing = [p for p in params if p not in module.trainable_names]
        if missing:
            raise ModelFormatError("the optimizer model updates %s, which the training model does not train"
                                   % missing)
        self._params = params
        if state.optimizer_state is None:
            state.optimizer_state = OptimizerState(0, default_lr(meta))
        self._opt_state = state.optimizer_state
        if self._opt_state.learning_rate is None:
            self._opt_state.learning_rate = default_lr(meta)
        feeds = [LR_INPUT, STEP_INPUT]
        for p in params:
            feeds += [p, grad_name(p)] + [state_name(p, s) for s in self._slots]
        # the updates happen in place; asking for the updated tensors keeps every update node live
        self._plan = Plan(model.graph, feeds, [o.name for o in model.graph.output], opset=opset_version(model))
        self._feeds_cache: Optional[List[Any]] = None

    @property
    def parameter_names(self) -> List[str]:
        """Names of the parameters this optimizer model updates, in its order."""
        return list(self._params)

    @property
    def model(self) -> ModelProto:
        """The optimizer model this optimizer applies (pytrain's update node, ORT's translated)."""
        return self._model

    @property
    def state_names(self) -> List[str]:
        """The state it keeps per parameter, by name (AdamW: its two moments; plain SGD: none)."""
        return list(self._slots)

    def _feeds(self) -> List[Any]:
        state = self._module.state
        feeds: List[Any] = [None, None]
        for p in self._params:
            param = state.parameters[p]
            if param.grad is None:
                raise InputError("parameter %r has no gradient yet: run a train step (module(...)) "
                                 "before optimizer.step()" % p)
            slots = self._opt_state.slots.setdefault(p, {})
            for s in self._slots:
                if s not in slots or slots[s].shape != param.data.shape:
                    slots[s] = np.zeros_like(param.data)
            feeds += [param.data, param.grad] + [slots[s] for s in self._slots]
        return feeds

    def step(self) -> None:
        """One optimizer update of every trainable parameter, in place. A gradient holding NaN or
        infinity is refused before anything changes (the step count included)."""
        feeds = self._feeds()
        k = first_non_finite(feeds[3::2 + len(self._slots)])  # one wasm call in the browser
        if k >= 0:
            raise DivergenceError("optimizer step refused: the gradient of %r holds NaN or infinite values; "
                                  "no parameter or optimizer state was changed" % self._params[k])
        feeds[0] = np.asarray(self._opt_state.learning_rate, dtype=np.float32)
        feeds[1] = np.asarray(self._opt_state.step + 1, dtype=np.int64)
        self._plan.run(feeds)
        self._opt_state.step += 1

    def set_learning_rate(self, learning_rate: float) -> None:
        self._opt_state.learning_rate = checked_learning_rate(learning_rate)

    def get_learning_rate(self) -> float:
        return float(self._opt_state.learning_rate)


def _optimizer_model(uri: Any, module: Module) -> ModelProto:
    """pytrain's optimizer model at ``uri``, or pytrain's update for ORT's one there."""
    try:
        raw: Optional[ModelProto] = ort_made.read(uri)
    except Exception:  # load_model below names what is wrong with the file
        raw = None
    spec = None if raw is None else ort_made.ort_optimizer_spec(raw)
    if raw is not None and spec is not None:
        return optimizer_model_for(spec, module.trainable_names, module.state, max(opset_version(raw), 13))
    ort_made.refuse_ort_made(uri, "optimizer model")
    return load_model(uri, "optimizer model")


def optimizer_model_for(opt: Any, params: Sequence[str], state: CheckpointState, opset: int) -> ModelProto:
    """:func:`build_optimizer_model` for ``params`` with the shapes and types ``state`` holds."""
    values = {p: state.parameters[p].data for p in params}
    return build_optimizer_model(opt, list(params), {p: list(v.shape) for p, v in values.items()},
                                 {p: dtypes.from_numpy(v.dtype) for p, v in values.items()}, opset)


def build_optimizer_model(opt: Any, params: Sequence[str], shapes: Dict[str, Sequence[int]],
                          elem_types: Dict[str, int], opset: int) -> ModelProto:
    """One update node for all parameters (multi-tensor, like torch's foreach optimizers), after
    an optional global-norm clip of all gradients."""
    inputs = [make_value_info(LR_INPUT, dtypes.FLOAT, []), make_value_info(STEP_INPUT, dtypes.INT64, [])]
    nodes = []
    grads = [grad_name(p) for p in params]
    for p, g in zip(params, grads):
        inputs.append(make_value_info(p, elem_types[p], list(shapes[p])))
        inputs.append(make_value_info(g, elem_types[p], list(shapes[p])))
        for s in opt.state_names:
            inputs.append(make_value_info(state_name(p, s), elem_types[p], list(shapes[p])))
    used = grads
    if opt.max_grad_norm:
        used = [g + ".clipped" for g in grads]
        nodes.append(make_node("ClipGradNorm", grads, used, name="clip_grad_norm", domain=PYTRAIN_DOMAIN,
                               max_norm=float(opt.max_grad_norm)))
    outputs: List = []
    update_in, update_out = [LR_INPUT, STEP_INPUT], []
    for p, g in zip(params, used):
        state_in = [state_name(p, s) for s in opt.state_names]
        update_in += [p, g] + state_in
        update_out += [p + ".updated"] + [s + ".updated" for s in state_in]
        outputs.append(make_value_info(p + ".updated", elem_types[p], list(shapes[p])))
    if update_out:
        nodes.append(make_node(opt.op_type, update_in, update_out, name="update", domain=PYTRAIN_DOMAIN,
                               **opt.attributes()))
    graph = make_graph(nodes, "pytrain_optimizer", inputs, outputs)
    return make_model(graph, [make_opsetid("", opset), make_opsetid(PYTRAIN_DOMAIN, 1)],
                      metadata={ARTIFACT_KEY: "optimizer", OPTIMIZER_KEY: opt.describe(),
                                DEFAULT_LR_KEY: repr(opt.lr),
                                STATE_NAMES_KEY: ",".join(opt.state_names)})


def checked_learning_rate(value: Any, what: str = "learning rate") -> float:
    """``value`` as a float, refusing what would destroy a model: NaN, infinity, negatives, non-numbers."""
    try:
        lr = float(value)
    except (TypeError, ValueError):
        raise InputError("the %s must be a number, got %r" % (what, value)) from None
    if not math.isfinite(lr) or lr < 0:
        raise InputError("the %s must be a finite number >= 0, got %r" % (what, value))
    return lr


class LinearLRScheduler:
    """Linear warm-up from 0 to ``initial_lr`` over ``warmup_step_count`` steps, then linear decay
    to 0 at ``total_step_count`` (ORT's schedule, with the arguments meaning what they say)."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int,
                 initial_lr: float) -> None:
        for name, v in (("warmup_step_count", warmup_step_count), ("total_step_count", total_step_count)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InputError("LinearLRScheduler: %s must be an integer, got %r" % (name, v))
        initial_lr = checked_learning_rate(initial_lr, "LinearLRScheduler's initial_lr")
        if warmup_step_count < 0 or total_step_count <= 0 or warmup_step_count > total_step_count:
            raise InputError("LinearLRScheduler needs 0 <= warmup_step_count <= total_step_count and "
                             "total_step_count > 0; got warmup %r, total %r" % (warmup_step_count, total_step_count))
        self.optimizer = optimizer
        self.warmup_step_count = int(warmup_step_count)
        self.total_step_count = int(total_step_count)
        self.initial_lr = float(initial_lr)
        self._step = 0
        optimizer.set_learning_rate(self.learning_rate_at(0))

    def learning_rate_at(self, step: int) -> float:
        if step < self.warmup_step_count:
            return self.initial_lr * step / max(1, self.warmup_step_count)
        remaining = self.total_step_count - step
        span = max(1, self.total_step_count - self.warmup_step_count)
        return self.initial_lr * max(0.0, remaining / span)

    def step(self) -> None:
        """Advance one step and set the optimizer's learning rate for the next update."""
        self._step += 1
        self.optimizer.set_learning_rate(self.learning_rate_at(self._step))
