"""``pytrain.ort.api``: ONNX Runtime's ``onnxruntime.training.api`` (``CheckpointState``, ``Module``,
``Optimizer``, ``LinearLRScheduler``) with ORT's semantics, on pytrain's training API."""
from __future__ import annotations

import os
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from pytrain.device import api as _api
from pytrain import checkpoint as _ck
from pytrain.errors import CheckpointError, InputError
from pytrain.base.layout import read_layout
from pytrain.ort._values import is_ort_value, to_numpy, to_ort_value
from pytrain.proto import ModelProto, model_metadata, opset_version
from pytrain.engine.validate import load_model

__all__ = ["CheckpointState", "LinearLRScheduler", "Module", "Optimizer", "Parameter"]

#: ORT's initial learning rate, whatever the optimizer
DEFAULT_LEARNING_RATE = 1e-3
_NOT_LOADED = "Please load the parameter states first"
_NOT_LOADED_ALL = "Please load all the parameter states first"
_MODEL_NOT_LOADED = "Please load the model parameters first."


class Parameter:
    """A parameter as ORT's API shows it: ``name``, ``data``, ``grad`` (zeros before the first train
    step when it trains, None when frozen), ``requires_grad``; ``data`` is assignable."""

    def __init__(self, core: _ck.Parameter) -> None:
        self._p = core

    @property
    def name(self) -> str:
        return self._p.name

    @property
    def requires_grad(self) -> bool:
        return bool(self._p.requires_grad)

    @property
    def data(self) -> np.ndarray:
        return self._p.data

    @data.setter
    def data(self, value: Any) -> None:
        _assign(self._p, value)

    @property
    def grad(self) -> Optional[np.ndarray]:
        if not self._p.requires_grad:
            return None
        if self._p.grad is None:
            return np.zeros(self._p.shape, self._p.dtype)
        return self._p.grad

    def __repr__(self) -> str:
        return "Parameter(name=%r, requires_grad=%s)" % (self.name, self.requires_grad)


def _assign(p: _ck.Parameter, value: Any) -> None:
    arr = np.asarray(to_numpy(value))
    if tuple(arr.shape) != tuple(p.shape):
        raise InputError("parameter %r has shape %s; the value given has shape %s"
                         % (p.name, list(p.shape), list(arr.shape)))
    if p.data is None:
        p.data = np.array(arr, dtype=p.dtype)
    else:
        np.copyto(p.data, arr.astype(p.dtype, copy=False))


class Parameters:
    """``state.parameters``: iterates as (name, Parameter); ``[name]`` gives a Parameter,
    ``[name] = array`` sets its data."""

    def __init__(self, state: "CheckpointState") -> None:
        self._state = state

    def core_api(self) -> Any:
        return self._state.core.parameters

    def __contains__(self, name: object) -> bool:
        return name in self.core_api()

    def __len__(self) -> int:
        return len(self.core_api())

    def __iter__(self) -> Iterator[Tuple[str, Parameter]]:
        for name, p in list(self.core_api().items()):
            yield name, Parameter(p)

    def __getitem__(self, name: str) -> Parameter:
        if self._state.nominal:
            raise CheckpointError("%s: the checkpoint is nominal (shapes only); fill it with "
                                  "Module.copy_buffer_to_parameters" % _NOT_LOADED)
        if name not in self.core_api():
            raise KeyError(name)
        return Parameter(self.core_api()[name])

    def __setitem__(self, name: str, value: Any) -> None:
        if self._state.nominal:
            raise CheckpointError("%s: the checkpoint is nominal (shapes only); fill it with "
                                  "Module.copy_buffer_to_parameters" % _NOT_LOADED_ALL)
        if name not in self.core_api():
            raise KeyError(name)
        _assign(self.core_api()[name], value)


class CheckpointState:
    """Parameters, optimizer state and properties (ORT's ``CheckpointState``). ``load_checkpoint``
    reads pytrain's checkpoints and those ONNX Runtime 1.19 writes."""

    def __init__(self, state: _ck.CheckpointState) -> None:
        #: pytrain's CheckpointState this one wraps (what pytrain's Module and Optimizer train)
        self.core = state
        #: True while the parameters hold shapes only (until Module.copy_buffer_to_parameters)
        self.nominal = state.nominal

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: Union[str, "os.PathLike[str]", bytes]) -> "CheckpointState":
        return cls(_load_core(checkpoint_uri))

    @classmethod
    def save_checkpoint(cls, state: "CheckpointState", checkpoint_uri: Union[str, "os.PathLike[str]"],
                        include_optimizer_state: bool = False) -> None:
        _ck.CheckpointState.save_checkpoint(state.core, checkpoint_uri, include_optimizer_state)

    @property
    def parameters(self) -> Parameters:
        return Parameters(self)

    @property
    def properties(self) -> Any:
        return self.core.properties


def _load_core(checkpoint_uri: Any) -> _ck.CheckpointState:
    # pytrain's loader also reads ONNX Runtime 1.19's flatbuffer checkpoints (pytrain.checkpoint.ort_format)
    return _ck.CheckpointState.load_checkpoint(checkpoint_uri)


class Module:
    """ORT's ``Module``: ``module(*inputs)`` runs a train step (training mode) or an eval step.
    OrtValue inputs give OrtValue outputs; numpy inputs give numpy outputs."""

    def __init__(self, train_model_uri: Any, state: CheckpointState, eval_model_uri: Any = None,
                 device: str = "cpu", session_options: Any = None) -> None:
        from pytrain.device.module import Module as _CoreModule

        if device != "cpu":
            raise InputError("pytrain runs on the CPU (numpy); device %r is not available" % device)
        if session_options is not None:
            raise InputError("session_options configure an ONNX Runtime session; pytrain has none to configure")
        if not isinstance(state, CheckpointState):
            raise InputError("Module takes a pytrain.ort.api.CheckpointState, got %s" % type(state).__name__)
        train = _training_model(train_model_uri, state)
        evals = _eval_model(eval_model_uri, state, train) if eval_model_uri is not None else None
        self._ort_state = state
        self._module = _CoreModule(train.SerializeToString(), state.core, evals)
        #: the eval model's (input names, output names), which input_names/output_names give in eval mode
        self._eval_names: Optional[Tuple[List[str], List[str]]] = None
        if evals is not None:
            layout = read_layout(model_metadata(ModelProto.FromString(evals)), "eval model", "eval")
            self._eval_names = (layout["user_inputs"] + layout["labels"], list(layout["outputs"]))

    # ---- modes and names ----------------------------------------------------------------------
    @property
    def training(self) -> bool:
        return self._module.training

    def train(self, mode: bool = True) -> "Module":
        self._module.train(mode)
        return self

    def eval(self) -> "Module":
        self._module.eval()
        return self

    def lazy_reset_grad(self) -> None:
        self._module.lazy_reset_grad()

    def input_names(self) -> List[str]:
        """The training model's input names, or in eval mode the eval model's (as in ORT)."""
        if not self.training and self._eval_names is not None:
            return list(self._eval_names[0])
        return self._module.input_names()

    def output_names(self) -> List[str]:
        """The training model's output names, or in eval mode the eval model's (as in ORT)."""
        if not self.training and self._eval_names is not None:
            return list(self._eval_names[1])
        return self._module.output_names()

    @property
    def core_module(self) -> Any:
        """pytrain's own training module under this ORT face (the Optimizer steps it)."""
        return self._module

    @property
    def checkpoint_state(self) -> CheckpointState:
        """The ORT checkpoint state this module trains."""
        return self._ort_state

    def require_loaded(self) -> None:
        """Refuse to step or read parameters while the checkpoint is nominal (ORT's message)."""
        if self._ort_state.nominal:
            raise CheckpointError(_MODEL_NOT_LOADED + " (the checkpoint is nominal: use copy_buffer_to_parameters)")

    # ---- steps --------------------------------------------------------------------------------
    def __call__(self, *user_inputs: Any) -> Any:
        self.require_loaded()
        as_ort = any(is_ort_value(x) for x in user_inputs)
        inputs = [to_numpy(x) for x in user_inputs]
        # numpy's fixed-width strings as the object arrays ONNX string tensors are in pytrain
        inputs = [x.astype(object) if isinstance(x, np.ndarray) and x.dtype.kind in "US" else x for x in inputs]
        outs = self._module(*inputs)
        if not as_ort:
            return outs
        if isinstance(outs, list):
            return [to_ort_value(o) for o in outs]
        return to_ort_value(outs)

    # ---- flat parameter buffers ---------------------------------------------------------------
    def get_parameters_size(self, trainable_only: bool = True) -> int:
        return self._module.get_parameters_size(trainable_only)

    def get_contiguous_parameters(self, trainable_only: bool = False) -> Any:
        """The parameters in one flat buffer: an OrtValue when onnxruntime is installed, else numpy."""
        self.require_loaded()
        return to_ort_value(self._module.get_contiguous_parameters(trainable_only))

    def copy_buffer_to_parameters(self, buffer: Any, trainable_only: bool = True) -> None:
        self._module.copy_buffer_to_parameters(to_numpy(buffer), trainable_only)
        if self._module.is_filled:
            self._ort_state.nominal = False

    def export_model_for_inferencing(self, inference_model_uri: Union[str, "os.PathLike[str]"],
                                     graph_output_names: Sequence[str]) -> None:
        self._module.export_model_for_inferencing(inference_model_uri, graph_output_names)


class Optimizer:
    """ORT's ``Optimizer``: takes pytrain's optimizer model or one an ``onnxblock.optim`` block built.
    The learning rate starts at ORT's 1e-3 unless the checkpoint carries one."""

    def __init__(self, optimizer_uri: Any, module: Module) -> None:
        from pytrain.ort.onnxblock.optim import from_model_metadata, spec_from_hyper_parameters
        from pytrain.device import ort_made

        try:
            raw: Optional[ModelProto] = ort_made.read(optimizer_uri)
        except Exception:  # load_model below names what is wrong with the file
            raw = None
        hyper = None if raw is None else from_model_metadata(model_metadata(raw))  # an onnxblock optimizer's
        spec = spec_from_hyper_parameters(hyper) if hyper is not None else \
            (None if raw is None else ort_made.ort_optimizer_spec(raw))
        core_state = module.checkpoint_state.core
        fresh = core_state.optimizer_state is None
        if raw is not None and spec is not None:  # ORT's or an onnxblock optimizer: pytrain's update
            params = list(hyper["params"]) if hyper is not None else module.core_module.trainable_names
            model = _api.optimizer_model_for(spec, params, core_state, max(opset_version(raw), 13))
        else:
            ort_made.refuse_ort_made(optimizer_uri, "optimizer model")
            model = load_model(optimizer_uri, "optimizer model")
        self._module = module
        self._optimizer = _api.Optimizer(model.SerializeToString(), module.core_module)
        if fresh:
            self._optimizer.set_learning_rate(DEFAULT_LEARNING_RATE)

    def step(self) -> None:
        self._module.require_loaded()
        self._optimizer.step()

    def set_learning_rate(self, learning_rate: float) -> None:
        self._optimizer.set_learning_rate(learning_rate)

    def get_learning_rate(self) -> float:
        return self._optimizer.get_learning_rate()


def _training_model(uri: Any, state: CheckpointState) -> ModelProto:
    """pytrain's training model for ``uri``: pytrain's own (ORT's accumulation interface taken off), or
    one ONNX Runtime made, read by ORT's conventions; an op pytrain does not run is refused by name."""
    from pytrain.ort._interface import strip_ort_interface
    from pytrain.device.ort_made import load_training_model

    return strip_ort_interface(load_training_model(uri, list(state.core.parameters)))


def _eval_model(uri: Any, state: CheckpointState, train: ModelProto) -> bytes:
    """The eval model's bytes: pytrain's as it is, or ORT's read by ORT's conventions."""
    from pytrain.device.ort_made import load_eval_model

    return load_eval_model(uri, list(state.core.parameters), train).SerializeToString()


class LinearLRScheduler(_api.LinearLRScheduler):
    """Linear warm-up to ``initial_lr`` over ``warmup_step_count`` steps, then linear decay to 0 at
    ``total_step_count`` (ORT's schedule and argument order)."""

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int,
                 initial_lr: float) -> None:
        super().__init__(optimizer, warmup_step_count, total_step_count, initial_lr)
