"""``Module``: runs train and eval steps of the generated models against a CheckpointState."""
from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from pytrain.base import dtypes, limits
from pytrain.engine import heap
from pytrain.device import ort_made
from pytrain.checkpoint import CheckpointState
from pytrain.errors import CheckpointError, DivergenceError, InputError, ModelFormatError, PytrainError
from pytrain.engine.executor import Plan, buffer_of
from pytrain.engine.export import export_inference_model
from pytrain.base.files import write_atomic
from pytrain.ops import backend
from pytrain.base.layout import LayoutError, read_layout
from pytrain.proto import ModelProto, model_metadata, opset_version, value_info_type
from pytrain.proto.message import sharing


_RNG_STEP = "pytrain.rng_step"


class _InputSpec:
    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name: str, elem_type: int, shape: Optional[list]) -> None:
        self.name = name
        self.dtype = dtypes.to_numpy(elem_type) if elem_type else None
        self.shape = shape

    def describe(self) -> str:
        dims = "?" if self.shape is None else "[%s]" % ", ".join("?" if d is None else str(d) for d in self.shape)
        return "%s %s" % (self.dtype or "any", dims)


def model_layout(model: ModelProto, what: str, kind: str) -> Dict[str, Any]:
    """The layout of a pytrain ``kind`` artifact ("training" or "eval"); ModelFormatError names ``what``."""
    try:
        return read_layout(model_metadata(model), what, kind)
    except LayoutError as e:
        raise ModelFormatError(str(e)) from None


def first_non_finite(values: Sequence[np.ndarray]) -> int:
    """Index of the first float array holding a NaN or an infinity, or -1. A sum is the cheap test
    (a finite sum means every element is finite); only a non-finite sum is checked element-wise,
    since a sum of huge finite values may overflow."""
    fast = backend.get("finite")  # all the arrays in one call (the browser's wasm kernel), or None
    if fast is not None:
        k = fast(values)
        if k is not None:
            return k
    for i, v in enumerate(values):
        if v.dtype.kind == "f" and v.size and not np.isfinite(v.sum(dtype=np.float64)):
            if not np.isfinite(v).all():
                return i
    return -1


def share_initializers(source: ModelProto, model: ModelProto, arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Of ``arrays`` (a plan's constants over ``source``), those ``model`` holds as initializers of the same
    name, type, shape and bytes: ``model``'s initializers take ``source``'s very bytes, so a weight both the
    training and the eval model hold (the frozen base weights under LoRA) is held once, and the arrays
    returned are the constants for ``model``'s plan (read-only views of those bytes, shared by both plans)."""
    held = {t.name: t for t in source.graph.initializer if t.name in arrays and t.HasField("raw_data")}
    shared: Dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        s = held.get(t.name)
        if (s is not None and t.HasField("raw_data") and s.data_type == t.data_type and list(s.dims) == list(t.dims)
                and (t.raw_data is s.raw_data or t.raw_data == s.raw_data)):
            t.raw_data = s.raw_data
            shared[t.name] = arrays[t.name]
    return shared


def unique_bytes(arrays: Sequence[Any], blobs: Sequence[bytes] = ()) -> int:
    """The bytes ``arrays`` and ``blobs`` hold, each buffer counted once (a view of another array or of
    one of the bytes, as a plan's constants are of their model's bytes, counts nothing more)."""
    owners = {id(b): len(b) for b in blobs}
    for a in arrays:
        if isinstance(a, np.ndarray):
            b = buffer_of(a)
            base = b.base
            if isinstance(base, (bytes, bytearray)):
                owners[id(base)] = len(base)
            else:
                owners[id(b)] = b.nbytes
    return sum(owners.values())


class MemoryEstimate(NamedTuple):
    """The memory a training step needs, in bytes, by :meth:`Module.memory_estimate`."""
    batch_size: int
    #: every parameter (trainable and frozen) and the constants of the training and eval models (with
    #: LoRA, the frozen base weights): each held once, the plans' constants being views of the models' bytes,
    #: which the two models share (:func:`share_initializers`)
    parameters: int
    #: one gradient per trainable parameter (what the step accumulates into)
    gradients: int
    #: the optimizer's state (e.g. AdamW's two moments per trainable parameter)
    optimizer_state: int
    #: the peak of what the training graph keeps alive at once: the batch, the activations kept for
    #: the backward pass and the gradients made so far
    activations: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    def describe(self) -> str:
        mib = 2.0 ** 20
        return ("%.1f MiB at batch size %d: parameters %.1f, gradients %.1f, optimizer state %.1f, activations %.1f MiB"
                % (self.total / mib, self.batch_size, self.parameters / mib, self.gradients / mib,
                   self.optimizer_state / mib, self.activations / mib))


class Module:
    """A trainable model (ORT's ``Module``): ``module(*inputs)`` runs a train step in training mode
    (forward, loss, backward; gradients accumulate until ``lazy_reset_grad``) or an eval step in
    eval mode, and returns the loss (plus any additional outputs)."""

    def __init__(self, train_model_uri: Any, state: CheckpointState, eval_model_uri: Any = None,
                 device: str = "cpu", seed: Optional[int] = None) -> None:
        if device != "cpu":
            raise InputError("pytrain runs on the CPU (numpy); device %r is not available" % device)
        heap.keep_freed_memory()  # each step reuses the last step's buffers instead of faulting in new pages
        # pytrain's artifacts, or ONNX Runtime's as they are (read by ORT's conventions)
        params = list(state.parameters)
        # Each weight is held once: the eval model's copies of the training model's initializers are read as
        # those very bytes, and the plans' constants are read-only arrays over them (share_initializers).
        self._train_model = ort_made.load_training_model(train_model_uri, params, copy=False)
        self._eval_model = None
        if eval_model_uri is not None:
            with sharing(t.raw_data for t in self._train_model.graph.initializer if t.HasField("raw_data")):
                self._eval_model = ort_made.load_eval_model(eval_model_uri, params, self._train_model)
        self._state = state
        self._seed = 0 if seed is None else int(seed)
        layout = model_layout(self._train_model, "training model", "training")
        self._layout = layout
        self._param_names: List[str] = layout["trainable"] + layout["frozen"]
        self._trainable: List[str] = list(layout["trainable"])
        self._filled = not state.nominal
        g = self._train_model.graph
        self._check_state({v.name: v for v in g.input})
        in_specs = {v.name: _InputSpec(v.name, *value_info_type(v)) for v in g.input}
        self._inputs = [in_specs[n] for n in layout["user_inputs"] + layout["labels"]]
        self._updates: Dict[str, str] = layout.get("state_updates", {})
        opset = opset_version(self._train_model)
        feeds = [s.name for s in self._inputs] + self._param_names
        self._train_plan = Plan(g, feeds, layout["outputs"] + layout["grads"] + list(self._updates),
                                opset=opset, training=True, seed=self._seed)
        self._n_out = len(layout["outputs"])
        self._eval_plan: Optional[Plan] = None
        if self._eval_model is not None:
            el = model_layout(self._eval_model, "eval model", "eval")
            self._eval_inputs = el["user_inputs"] + el["labels"]
            self._eval_plan = Plan(self._eval_model.graph, self._eval_inputs + self._param_names,
                                   el["outputs"], opset=opset_version(self._eval_model), training=False,
                                   constants=share_initializers(self._train_model, self._eval_model,
                                                                self._train_plan.constants))
        self._training = True
        self._reset_grad = True
        self._live: Dict[Any, Tuple[np.ndarray, np.ndarray, int]] = {}   # memory_estimate's probes by input shape

    # ---- state -----------------------------------------------------------------------------------
    def _check_state(self, graph_inputs: Dict[str, Any]) -> None:
        if not isinstance(self._state, CheckpointState):
            raise InputError("Module takes a CheckpointState (CheckpointState.load_checkpoint(path)), got %s"
                             % type(self._state).__name__)
        for name in self._param_names:
            p = self._state.parameters.get(name)
            if p is None:
                raise CheckpointError("the checkpoint has no parameter %r, which the training model needs"
                                      % name)
            if name in graph_inputs:  # the checkpoint must be of this model: same shapes and types
                elem, dims = value_info_type(graph_inputs[name])
                want_dtype = dtypes.to_numpy(elem) if elem else p.dtype
                fixed = dims is not None and all(isinstance(d, int) for d in dims)
                if fixed and p.data is None and p.shape == () and dims:
                    p.shape = tuple(dims)  # a nominal entry that recorded no shape (ORT's) takes the model's
                if fixed and (list(p.shape) != list(dims) or np.dtype(p.dtype) != want_dtype):
                    raise CheckpointError("checkpoint parameter %r is %s %s but the training model expects %s %s: "
                                          "the checkpoint belongs to another model"
                                          % (name, list(p.shape), np.dtype(p.dtype), list(dims), want_dtype))
            if p.data is None:  # nominal checkpoint: room for copy_buffer_to_parameters to fill
                p.data = np.zeros(p.shape, dtype=p.dtype)
            if name in self._trainable and not p.requires_grad:
                p.requires_grad = True

    @property
    def state(self) -> CheckpointState:
        """The CheckpointState this module trains (parameters, gradients, optimizer state)."""
        return self._state

    @property
    def models(self) -> Dict[str, ModelProto]:
        """The models this module runs by role ("training", and "eval" when given): a pytrain artifact as it
        was read (it serializes to the very bytes read), an ORT one as converted. Another Module built on
        them holds no second copy (they are read as they are, not copied)."""
        out = {"training": self._train_model}
        if self._eval_model is not None:
            out["eval"] = self._eval_model
        return out

    @property
    def trainable_names(self) -> List[str]:
        """Names of the parameters that train, in the training model's order."""
        return list(self._trainable)

    @property
    def parameter_names(self) -> List[str]:
        """Names of every parameter (trainable, then frozen), in the training model's order."""
        return list(self._param_names)

    @property
    def is_filled(self) -> bool:
        """False while a nominal checkpoint's parameters wait for copy_buffer_to_parameters."""
        return self._filled

    @property
    def training(self) -> bool:
        return self._training

    def train(self, mode: bool = True) -> "Module":
        self._training = bool(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        """The next train step overwrites the gradients instead of adding to them."""
        self._reset_grad = True

    def input_names(self) -> List[str]:
        """Names the step takes, in order: the model's inputs, then the labels."""
        return [s.name for s in self._inputs]

    def output_names(self) -> List[str]:
        return list(self._layout["outputs"])

    # ---- steps -------------------------------------------------------------------------------------
    def _check_inputs(self, args: Sequence[Any]) -> List[np.ndarray]:
        if len(args) != len(self._inputs):
            raise InputError("the model takes %d inputs (%s), got %d" % (
                len(self._inputs), ", ".join("%s: %s" % (s.name, s.describe()) for s in self._inputs), len(args)))
        dims: Dict[str, Tuple[int, str]] = {}
        out = []
        for spec, a in zip(self._inputs, args):
            arr = np.asarray(a)
            if spec.dtype is not None and arr.dtype != spec.dtype:
                same_kind = arr.dtype.kind == spec.dtype.kind or (arr.dtype.kind in "iu" and spec.dtype.kind in "iu")
                if not same_kind:
                    raise InputError("input %r expects %s, got an array of %s" % (spec.name, spec.describe(), arr.dtype))
                arr = arr.astype(spec.dtype)
            if spec.shape is not None:
                if arr.ndim != len(spec.shape):
                    raise InputError("input %r expects shape %s, got %s" % (spec.name, spec.describe(), list(arr.shape)))
                for axis, (want, got) in enumerate(zip(spec.shape, arr.shape)):
                    if isinstance(want, int) and want != got:
                        raise InputError("input %r expects shape %s, got %s (axis %d)" % (
                            spec.name, spec.describe(), list(arr.shape), axis))
                    if isinstance(want, str):
                        seen = dims.setdefault(want, (got, spec.name))
                        if seen[0] != got:
                            raise InputError("inputs %r and %r must agree on dimension %r: %d vs %d" % (
                                seen[1], spec.name, want, seen[0], got))
            out.append(arr)
        return out

    def __call__(self, *user_inputs: Any) -> Any:
        inputs = self._check_inputs(user_inputs)
        params = [self._state.parameters[n].data for n in self._param_names]
        if self._training:
            if not self._filled:
                raise CheckpointError("the checkpoint is nominal (shapes only): fill the parameters with "
                                      "copy_buffer_to_parameters before training")
            if self._train_plan.random:
                self.reseed(self._train_plan.rng)
            results = self._train_plan.run(inputs + params)
            n_grads = len(self._trainable)
            grads = results[self._n_out:self._n_out + n_grads]
            self._refuse_non_finite(inputs, results[:self._n_out], grads)
            for name, g in zip(self._trainable, grads):
                p = self._state.parameters[name]
                if p.grad is None or p.grad.shape != p.data.shape:
                    p.grad = np.empty_like(p.data)  # owned once, reused every step
                    np.copyto(p.grad, g)
                elif self._reset_grad:
                    np.copyto(p.grad, g)
                else:
                    p.grad += g
            self._reset_grad = False
            for (out, buf), value in zip(self._updates.items(), results[self._n_out + n_grads:]):
                np.copyto(self._state.parameters[buf].data, value)
            outs = results[:self._n_out]
        else:
            if self._eval_plan is None:
                raise InputError("this Module has no eval model: pass eval_model_uri to run eval steps")
            outs = self._eval_plan.run(inputs + params)
        outs = [np.asarray(o) for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def _refuse_non_finite(self, inputs: List[np.ndarray], outs: List[Any], grads: List[Any]) -> None:
        """Like torch's GradScaler, a step whose loss or gradient is not finite is skipped: raised before
        any gradient, running statistic or optimizer state changes, naming the culprit."""
        loss = np.asarray(outs[0]) if outs else np.zeros(())
        bad_loss = first_non_finite([loss]) >= 0
        k = first_non_finite([np.asarray(g) for g in grads])
        if not bad_loss and k < 0:
            return
        j = first_non_finite(inputs)
        culprit = (" (input %r holds NaN or infinite values)" % self._inputs[j].name) if j >= 0 else ""
        if bad_loss:
            what = "the loss is %s" % (float(loss.ravel()[0]) if loss.size == 1 else "not finite")
        else:
            what = "the gradient of %r has %d non-finite values" % (
                self._trainable[k], int(np.size(grads[k]) - np.count_nonzero(np.isfinite(grads[k]))))
        raise DivergenceError("train step refused: %s%s; no gradient, statistic or parameter was changed "
                              "(lower the learning rate, check the data, or restore the last checkpoint)"
                              % (what, culprit), reason=what + culprit)

    def reseed(self, rng: np.random.Generator) -> None:
        """Set ``rng`` (a training plan's) to this train step's stream and count the step: Dropout's masks come
        from (seed, train step), with the step kept in the checkpoint, so a run resumed from a checkpoint (or
        trained by another device's plan: pytrain.device.webgpu) draws exactly the masks this run would have."""
        step = int(self._state.properties.get(_RNG_STEP, 0))
        rng.bit_generator.state = np.random.PCG64([self._seed, step]).state
        self._state.properties[_RNG_STEP] = step + 1

    # ---- memory -------------------------------------------------------------------------------------
    def memory_estimate(self, *user_inputs: Any, optimizer: Any = None,
                        batch_size: Optional[int] = None) -> MemoryEstimate:
        """The memory a train step on a batch like ``user_inputs`` (inputs, then labels) needs, at
        ``batch_size`` (default: theirs), with ``optimizer``'s state (a :class:`pytrain.device.api.Optimizer`).

        Parameters, gradients and optimizer state come from the checkpoint's shapes; the activations
        from the compiled training plan, which frees each tensor after its last reader: it runs once at
        batch size 1 and once at 2 (slices of the example) recording the bytes alive after every node,
        and each node's count, linear in the batch size, is extrapolated to ``batch_size``; the peak is
        the largest. What a kernel allocates and frees inside one node is not counted."""
        inputs = self._check_inputs(user_inputs)
        batched = [s.shape is None or not isinstance(s.shape[0], int) for s in self._inputs]
        size = next((a.shape[0] for a in inputs if a.ndim), 1)
        batch = int(size if batch_size is None else batch_size)
        key = tuple((a.shape[1:] if b else a.shape, a.dtype.str) for a, b in zip(inputs, batched))
        if key not in self._live:
            self._live[key] = self._probe(inputs, batched, size)
        one, two, at = self._live[key]
        steps = one + (two - one) * (batch - at)
        params = [self._state.parameters[n].data for n in self._param_names]
        plans = [p for p in (self._train_plan, self._eval_plan) if p is not None]
        models = [m for m in (self._train_model, self._eval_model) if m is not None]
        held = unique_bytes(params + [a for p in plans for a in p.constants.values()],
                          [t.raw_data for m in models for t in m.graph.initializer if t.HasField("raw_data")])
        trained = sum(self._state.parameters[n].data.nbytes for n in self._trainable)
        slots = len(getattr(optimizer, "state_names", ())) if optimizer is not None else 0
        return MemoryEstimate(batch, held, trained, slots * trained,
                              int(max(steps.max(initial=0), 0)))

    def _probe(self, inputs: List[np.ndarray], batched: List[bool], size: int) -> Tuple[np.ndarray, np.ndarray, int]:
        """Bytes alive after each node (the batch included) at batch sizes 1 and 2, or, for a graph that
        runs only at the example's batch size (a batch dimension baked into a Reshape), at that size twice."""
        params = [self._state.parameters[n].data for n in self._param_names]

        def at(n: Optional[int]) -> np.ndarray:
            feeds = [np.repeat(a[:1], n, axis=0) if (b and n is not None) else a for a, b in zip(inputs, batched)]
            fed = sum(a.nbytes for a, b in zip(feeds, batched) if b)
            return np.asarray(self._train_plan.live_bytes(feeds + params), dtype=np.float64) + fed

        if not any(batched) or size == 0:
            trace = at(None)
            return trace, trace, size
        try:
            return at(1), at(2), 1
        except PytrainError:
            trace = at(None)
            return trace, trace, size

    def check_memory(self, *user_inputs: Any, optimizer: Any = None,
                     batch_size: Optional[int] = None) -> MemoryEstimate:
        """:meth:`memory_estimate`, refused with LimitError (naming the estimate and the limit) when it is over
        ``pytrain.base.limits.max_heap_bytes`` (in a tab: over what is left of it, :func:`pytrain.base.limits.heap_budget`):
        before the first step, instead of the tab running out of memory."""
        est = self.memory_estimate(*user_inputs, optimizer=optimizer, batch_size=batch_size)
        limits.check_heap(est.total, "training this model needs " + est.describe(), self.held_bytes(est))
        return est

    def held_bytes(self, est: MemoryEstimate) -> int:
        """The bytes of ``est`` already allocated now: the parameters, and the gradients and optimizer state
        once a step has made them (what a bounded heap's use already counts, :func:`pytrain.base.limits.heap_budget`)."""
        params = self._state.parameters
        grads = sum(params[n].grad.nbytes for n in self._trainable if params[n].grad is not None)
        opt = self._state.optimizer_state
        slots = sum(a.nbytes for per in opt.slots.values() for a in per.values()) if opt is not None else 0
        return est.parameters + grads + slots

    # ---- flat parameter buffers (ORT's contiguous-buffer API) ---------------------------------------
    def _names(self, trainable_only: bool) -> List[str]:
        return list(self._trainable) if trainable_only else list(self._param_names)

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        return int(sum(int(np.prod(self._state.parameters[n].shape)) for n in self._names(trainable_only)))

    def get_contiguous_parameters(self, trainable_only: bool = False) -> np.ndarray:
        """All parameters flattened into one float32 vector, in the model's parameter order."""
        parts = [self._state.parameters[n].data.ravel() for n in self._names(trainable_only)]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def copy_buffer_to_parameters(self, buffer: Any, trainable_only: bool = True) -> None:
        """Fill the parameters from one flat vector (the inverse of get_contiguous_parameters)."""
        flat = np.asarray(buffer).ravel()
        if flat.dtype.kind not in "biuf":
            raise InputError("copy_buffer_to_parameters takes a numeric vector, got an array of %s" % flat.dtype)
        if first_non_finite([flat]) >= 0:
            raise InputError("copy_buffer_to_parameters: the buffer holds NaN or infinite values")
        size = self.get_parameters_size(trainable_only)
        if flat.size != size:
            raise InputError("the buffer has %d values; the %s parameters need %d"
                             % (flat.size, "trainable" if trainable_only else "", size))
        pos = 0
        for n in self._names(trainable_only):
            p = self._state.parameters[n]
            k = int(np.prod(p.shape))
            np.copyto(p.data, flat[pos:pos + k].reshape(p.shape).astype(p.dtype, copy=False))
            pos += k
        if trainable_only and self._layout["frozen"] and not self._filled:
            return  # frozen ones still missing
        self._filled = True

    # ---- export -------------------------------------------------------------------------------------
    def export_model_for_inferencing(self, inference_model_uri: Union[str, "os.PathLike[str]", None],
                                     graph_output_names: Sequence[str], merge_adapters: bool = True) -> bytes:
        """A standard ONNX inference model with the current weights; written to the path when given.
        LoRA adapters are folded into their weights unless ``merge_adapters=False``."""
        if self._eval_model is None:
            raise InputError("exporting needs the eval model: pass eval_model_uri to Module")
        params = {n: self._state.parameters[n].data for n in self._param_names}
        data = export_inference_model(self._eval_model, params, list(graph_output_names),
                                      merge_adapters).SerializeToString()
        if inference_model_uri is not None:
            write_atomic(inference_model_uri, data)
        return data
