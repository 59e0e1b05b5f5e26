"""Layer 6, device: training a Module with its Optimizer on the page's WebGPU device
(:mod:`pytrain.ops.webgpu`): the training and optimizer models planned once with the GPU kernels, the
parameters and optimizer state uploaded once and updated in place on the GPU, every step's batch
uploaded (counted), and only the losses read back, asynchronously.

A slice of steps only enqueues work: :meth:`GpuTraining.step` returns at once, and the step's loss is
in :attr:`GpuTraining.losses` once the worker's JS has awaited the device's ``settle()``.
:meth:`GpuTraining.to_cpu` enqueues the copy of the parameters and moments back, and :meth:`GpuTraining.commit`
(after the settle) puts them into the module's CheckpointState, for saving, exporting or going on on the CPU.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from pytrain.base.layout import LR_INPUT, STEP_INPUT, grad_name, state_name
from pytrain.device.api import Optimizer
from pytrain.device.module import MemoryEstimate, Module, model_layout
from pytrain.engine.executor import Plan
from pytrain.errors import InputError, LimitError
from pytrain.ops.webgpu import Device, GpuTensor
from pytrain.ops.webgpu import kernels as gpu_kernels
from pytrain.proto import opset_version


class GpuTraining:
    """``module`` and ``optimizer`` trained on ``device``: one call of :meth:`step` is a train step
    and an optimizer step (the gradients of one batch, as ``lazy_reset_grad`` before every step)."""

    def __init__(self, module: Module, optimizer: Optimizer, device: Device,
                 estimate: Optional[MemoryEstimate] = None, keep_moments: bool = False) -> None:
        """``estimate``: the step's memory (:meth:`Module.memory_estimate`), checked against the device's memory
        before anything is uploaded (without it, the parameters and optimizer state are). ``keep_moments``: the
        optimizer state lives on the GPU only (a model whose state does not fit the wasm heap): the heap's moments
        go up one by one and leave the heap, the missing ones are zeros made on the GPU, :meth:`to_cpu` reads the
        parameters only, and the CheckpointState's slots become :class:`MomentsOnGpu` (reading them raises)."""
        self.module, self.optimizer, self.device = module, optimizer, device
        train = module.models["training"]
        layout = model_layout(train, "training model", "training")
        # {update output: the buffer it replaces}: BatchNormalization's running statistics, kept on the GPU
        self._updates: Dict[str, str] = layout.get("state_updates", {})
        self._n_out = len(layout["outputs"])
        self._trainable = module.trainable_names
        params = module.parameter_names
        self._plan = Plan(train.graph, module.input_names() + params,
                          layout["outputs"] + layout["grads"] + list(self._updates),
                          opset=opset_version(train), training=True, kernels=gpu_kernels.choose)
        opt = optimizer.model
        self._slots = optimizer.state_names
        feeds = [LR_INPUT, STEP_INPUT]
        for p in optimizer.parameter_names:
            feeds += [p, grad_name(p)] + [state_name(p, s) for s in self._slots]
        self._opt_plan = Plan(opt.graph, feeds, [o.name for o in opt.graph.output], opset=opset_version(opt),
                              kernels=gpu_kernels.choose)
        state = module.state
        if isinstance(state.optimizer_state.slots, MomentsOnGpu):
            raise InputError(state.optimizer_state.slots.why)
        self._check_fits(estimate)
        self.keep_moments = keep_moments
        self.params: Dict[str, GpuTensor] = {n: device.upload(state.parameters[n].data) for n in params}
        self.moments: Dict[str, List[GpuTensor]] = {p: [self._moment(p, s) for s in self._slots]
                                                     for p in optimizer.parameter_names}
        if keep_moments:
            state.optimizer_state.slots = MomentsOnGpu(self._moments_bytes())
        #: the losses of the steps enqueued since :meth:`take_losses` (there after the JS settle())
        self.losses: List[np.ndarray] = []
        self._copies: List[Any] = []   # (state array, the copy read back into it) from to_cpu

    def _moment(self, p: str, slot: str) -> GpuTensor:
        """Moment ``slot`` of parameter ``p`` on the GPU: the heap's (which leaves the heap when ``keep_moments``),
        or zeros (made on the GPU when ``keep_moments``)."""
        held = self.module.state.optimizer_state.slots.setdefault(p, {})
        data = self.module.state.parameters[p].data
        if slot in held:
            return self.device.upload(held.pop(slot) if self.keep_moments else held[slot])
        return self.device.zeros(data.shape) if self.keep_moments else self.device.upload(np.zeros_like(data))

    def _moments_bytes(self) -> int:
        return sum(4 * t.size for per in self.moments.values() for t in per)

    def load_moment(self, p: str, slot: str, array: np.ndarray) -> None:
        """Moment ``slot`` of parameter ``p`` on the GPU replaced by ``array`` (uploaded; a resume streaming the
        moments one at a time, :mod:`pytrain.webapp.gpu_load`)."""
        if p not in self.moments or slot not in self._slots:
            raise InputError("the checkpoint's optimizer state %r of %r is not one this optimizer keeps (%s)"
                             % (slot, p, ", ".join(self._slots)))
        self.moments[p][self._slots.index(slot)] = self.device.upload(array)

    @property
    def slot_names(self) -> List[str]:
        """The optimizer state's slots of each parameter, in :attr:`moments`' order."""
        return list(self._slots)

    def _check_fits(self, estimate: Optional[MemoryEstimate]) -> None:
        """Refuse (GpuTransferError naming the tensor and the limit) a model whose parameter exceeds the device's
        largest buffer, or whose step exceeds its memory, before any upload."""
        params = self.module.state.parameters
        for n in self.module.parameter_names:
            self.device.check("parameter %r %s" % (n, list(params[n].data.shape)), params[n].data.nbytes, 0)
        if estimate is not None:
            self.device.check("training this model (%s)" % estimate.describe(), 0, estimate.total)
        else:
            held = sum(params[n].data.nbytes for n in self.module.parameter_names)
            moments = sum(params[p].data.nbytes for p in self.optimizer.parameter_names) * len(self._slots)
            self.device.check("this model's parameters and optimizer state", 0, held + moments)

    def step(self, *inputs: Any) -> int:
        """Enqueue one train step and optimizer step on ``inputs`` (the model's inputs, then the labels);
        returns the step's index in :attr:`losses`."""
        dev = self.device
        feeds = [dev.upload(np.asarray(x), keep_host=True) for x in inputs]
        if self._plan.random:   # (Dropout's masks: the CPU step's, drawn on the CPU and uploaded)
            self.module.reseed(self._plan.rng)
        results = self._plan.run(feeds + [self.params[n] for n in self.module.parameter_names])
        n_grads = len(self._trainable)
        grads = dict(zip(self._trainable, results[self._n_out:self._n_out + n_grads]))
        for buf, value in zip(self._updates.values(), results[self._n_out + n_grads:]):
            self.params[buf] = value if isinstance(value, GpuTensor) else dev.upload(np.asarray(value, np.float32))
        opt_state = self.module.state.optimizer_state
        opt_feeds: List[Any] = [np.asarray(opt_state.learning_rate, np.float32),
                                np.asarray(opt_state.step + 1, np.int64)]
        for p in self.optimizer.parameter_names:
            opt_feeds += [self.params[p], grads[p]] + self.moments[p]
        self._opt_plan.run(opt_feeds)
        opt_state.step += 1
        loss = results[0]
        if not isinstance(loss, GpuTensor):
            loss = dev.upload(np.asarray(loss, np.float32))
        box = np.full(1, np.nan, np.float32)   # each its own array: it must stay put until the read lands
        loss.read_into(box)
        self.losses.append(box)
        return len(self.losses) - 1

    def take_losses(self) -> List[float]:
        """The losses of the steps enqueued since the last call (NaN for a read not landed yet: call this
        after the JS has awaited the device's settle())."""
        out = [float(b[0]) for b in self.losses]
        self.losses = []
        return out

    def to_cpu(self) -> None:
        """Enqueue the copy of every parameter and optimizer moment into arrays of their own, which
        :meth:`commit` puts into the module's CheckpointState once the JS has awaited settle() (never half:
        a device lost before the copies land leaves the state as it was)."""
        self._copies = []
        for n, t in self.params.items():
            self._copies.append((self.module.state.parameters[n].data, self._read(t)))
        if self.keep_moments:   # (read one by one when saved: pytrain.webapp.gpu_save)
            return
        slots = self.module.state.optimizer_state.slots
        for p, moments in self.moments.items():
            held = slots.setdefault(p, {})
            for s, t in zip(self._slots, moments):
                if s not in held:
                    held[s] = np.zeros(t.shape, np.float32)
                self._copies.append((held[s], self._read(t)))

    def _read(self, t: GpuTensor) -> np.ndarray:
        box = np.empty(t.shape, np.float32)
        t.read_into(box)
        return box

    def commit(self) -> None:
        """Put the copies :meth:`to_cpu` enqueued (landed: after settle()) into the CheckpointState."""
        for target, box in self._copies:
            np.copyto(target, box)
        self._copies = []

    def transfers(self) -> Dict[str, int]:
        """The device's counted transfers and dispatches so far (see Device.counts)."""
        return self.device.counts()



class MomentsOnGpu(dict):
    """The CheckpointState's optimizer slots while the moments live on the GPU only (``keep_moments``): reading
    them on the CPU (a CPU step, a save that is not the streamed one) raises LimitError saying why, instead of
    finding no moments and starting from zeros; ``values()`` alone answers, empty: what the heap holds of them."""

    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.why = ("the optimizer state (%.1f MiB) lives on the GPU only, past the wasm heap's budget: the CPU "
                    "cannot read it (a save streams it from the GPU: resume the run from its last save)"
                    % (nbytes / 2.0 ** 20))

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise LimitError(self.why)

    def values(self) -> Any:
        return []   # (what the heap holds of them, as Module.held_bytes counts: nothing)

    __getitem__ = __setitem__ = __delitem__ = __iter__ = __contains__ = __len__ = _refuse
    get = setdefault = pop = items = keys = copy = update = clear = _refuse
