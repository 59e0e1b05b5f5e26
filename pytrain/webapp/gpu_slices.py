"""Layer 9, webapp: the page's training slices on the WebGPU device (pytrain/device/webgpu.py), when the
page registered one (the user turned the GPU on: web/worker/boot.js installWebGPU).

A slice enqueues its steps and returns at once; the worker's JS awaits the device (``settle()``) and then
calls the session's ``gpu_finish``, which hands over the slice's losses and does what the CPU slice does at
its end (the position saved, the good checkpoint kept at an epoch's end). The parameters and optimizer state
stay on the GPU between slices: the CheckpointState in the wasm heap is then :attr:`GpuSlices.stale`, and is
refreshed only when the CPU needs it (a save, an export, an evaluation, a prediction: the worker's JS calls
``gpu_sync``, awaits the device, then ``gpu_commit``; an epoch's end and a refusal enqueue the copy with the
slice). The session's bridge refuses any other call while the heap is stale. A device lost rewinds the
position to the last state read back (or uploaded: the heap's, still valid), from where the CPU trains.
A model the GPU cannot train (an op without a shader reading a GPU tensor, running statistics) is
refused once, with the reason kept, and trains on the CPU.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain.base import limits
from pytrain.checkpoint import Properties
from pytrain.device.webgpu import GpuTraining
from pytrain.errors import InputError, PytrainError
from pytrain.ops.webgpu import GpuTransferError, choice, device
from pytrain.run.loop import Position
from pytrain.webapp.common import WebappError
from pytrain.webapp.gpu_load import LoadStream
from pytrain.webapp.gpu_save import SaveStream


class Slice(NamedTuple):
    """What a slice trains: the epoch's batches (index arrays), how to fetch one, and its budget."""
    batches: Sequence[Any]
    fetch: Callable[[Any], Tuple[Any, ...]]
    budget_ms: float
    max_steps: int


class GpuSlices:
    """The session's WebGPU training: the GpuTraining of its current module and optimizer, the reason it
    was refused (then the CPU trains), and whether the slice awaiting its losses ended an epoch."""

    def __init__(self) -> None:
        self.training: Optional[GpuTraining] = None
        self.refused: Optional[str] = None
        self.epoch_end = False
        #: the GPU holds parameters and optimizer state newer than the CheckpointState's (not read back yet)
        self.stale = False
        #: how many times the state was read back (whole: every parameter and moment)
        self.readbacks = 0
        self._last: Optional[GpuTraining] = None   # the slice awaiting its losses
        self._valid: Optional[Mark] = None   # where the heap's state is: the CPU goes on from there if the GPU fails
        self._copying: Optional[Mark] = None   # where the copy enqueued (to_cpu) was taken, until committed
        self._drop = False   # the copy's commit lets the GPU training go (the CPU will change the state)
        self._choice = choice()   # the user's device choice this training was made under
        self._save: Optional[SaveStream] = None   # the streamed save under way
        #: the device was lost with the optimizer state on it: a new one may resume from the last good checkpoint
        self.renew = False
        self._load: Optional[LoadStream] = None   # that resume, under way
        self._estimate: Any = None   # the step's memory the training was checked with (a resume checks it again)

    def describe(self) -> Optional[str]:
        """"GPU: <adapter>" when the page has a WebGPU device and the model trains there, else None."""
        dev = device()
        return None if dev is None or self.refused else "GPU: " + dev.adapter

    def _training(self, module: Any, optimizer: Any, batch: Sequence[Any], at: Any) -> Optional[GpuTraining]:
        t = self.training
        if t is None or t.module is not module or t.optimizer is not optimizer:
            if self.stale:   # (the worker reads the state back before it changes the model: gpu_sync(drop=True))
                raise PytrainError("the model changed while its trained parameters were on the GPU, not read back")
            try:   # (the step's memory at this batch size, checked against the GPU's before any upload)
                estimate = module.memory_estimate(*batch, optimizer=optimizer)
            except PytrainError:
                estimate = None
            keep = check_heap(module, estimate) if estimate is not None else False
            self._estimate = estimate
            try:
                self.training = GpuTraining(module, optimizer, device(), estimate, keep_moments=keep)
            except (InputError, GpuTransferError) as e:
                self.refused, self.training = str(e), None
            else:
                self._valid = Mark.now(module, at)
        return self.training

    def run(self, module: Any, optimizer: Any, at: Any, work: Slice) -> Optional[int]:
        """Enqueue the slice's steps from ``at`` (advanced in place); the number enqueued, or None when the
        device cannot train this model (``at`` unchanged: the CPU trains it)."""
        if self._choice != choice():   # turned off or on since: the CPU may have trained in between
            if self.stale:   # (the worker reads the state back before it changes the device: gpu_sync(drop=True))
                raise PytrainError("the device changed while the trained parameters were on the GPU, not read back")
            self._choice, self.training, self.refused = choice(), None, None
        if device() is None or self.refused:
            return None
        gpu = self._training(module, optimizer, work.fetch(work.batches[at.epoch_step]), at)
        if gpu is None:
            return None
        start, done = time.perf_counter(), 0
        self.epoch_end, self._last = False, gpu
        while at.epoch_step < len(work.batches) and done < work.max_steps:
            try:
                gpu.step(*work.fetch(work.batches[at.epoch_step]))
            except GpuTransferError as e:   # (raised in the training plan: this step changed nothing)
                self.refused, self.training = str(e), None
                break
            done += 1
            at.step += 1
            at.epoch_step += 1
            if at.epoch_step >= len(work.batches):
                at.epoch, at.epoch_step, self.epoch_end = at.epoch + 1, 0, True
                break
            if (time.perf_counter() - start) * 1000.0 >= work.budget_ms:
                break
        self.stale = self.stale or done > 0
        if done == 0 and not self.stale:
            return None   # (refused at its first step, the heap current: the CPU trains this slice)
        if self.epoch_end or self.training is None:   # (the epoch's evaluation and save, or the CPU, read it next)
            self._copy(gpu, at, False)
        return done

    def _copy(self, gpu: GpuTraining, at: Any, drop: bool) -> None:
        gpu.to_cpu()
        self._last, self._drop = gpu, drop
        self._copying = Mark.now(gpu.module, at)

    @property
    def moments_on_gpu(self) -> bool:
        """Whether the optimizer state lives on the GPU only (past the heap's budget): a save streams it."""
        return self.training is not None and self.training.keep_moments

    def save(self, start: bool) -> Dict[str, Any]:
        """The streamed checkpoint (:class:`pytrain.webapp.gpu_save.SaveStream`): ``start`` begins one (``on_heap``
        when the optimizer state is in the heap: the plain save is whole); each call then its next step."""
        if start:
            if not self.moments_on_gpu or self.training is None:
                return {"on_heap": True}
            self._save = SaveStream(self.training)
        if self._save is None:
            raise PytrainError("no streamed save is under way (gpu_save(start=True) first)")
        out = self._save.next()
        if out["done"]:
            self._save = None
        return out

    def sync(self, at: Any, drop: bool = False) -> bool:
        """Enqueue the copy of the GPU's parameters and optimizer state back into the CheckpointState (there after
        the JS awaited the device and called :meth:`commit`); False when the heap is current (nothing to wait for).
        ``drop``: the CPU is about to change the state or the model, so the GPU training goes once read back."""
        if self.stale and self.training is not None:
            self._copy(self.training, at, drop)
            return True
        if drop:
            self.training = None
        return False

    def commit(self) -> None:
        """Put the copies enqueued (landed: after the JS settle) into the CheckpointState: the heap is current."""
        if self._copying is None or self._last is None:
            return
        self._last.commit()
        self._valid, self._copying = self._copying, None
        self.stale = False
        self.readbacks += 1
        if self._drop:
            self.training, self._drop = None, False

    def finish(self) -> List[float]:
        """The last slice's losses (and, at an epoch's end or a refusal, its parameters and moments put into the
        CheckpointState): call after the JS awaited the device."""
        if self._last is None:
            return []
        self.commit()
        return self._last.take_losses()

    def lost(self, at: Any, module: Any, reason: str) -> None:
        """The device failed: every step since the state was last read back (or uploaded) is undone (the position,
        the optimizer's step count and the checkpoint's properties, the dropout generator's step among them, as
        then; the CheckpointState never took a copy that did not land) and the CPU trains from there on, with the
        same numbers."""
        mark = self._valid if self.stale or self._copying is not None else None
        if mark is not None and module is not None:
            mark.restore(at, module)
        step = at.step if mark is None else mark.position[2]
        self.refused = "the GPU failed (%s): the CPU trains from step %d" % (reason, step)
        self.renew = self.moments_on_gpu
        if self.renew:   # (the heap never held them: the CPU step refuses by name, MomentsOnGpu, unless a new device)
            self.refused = ("the GPU failed (%s) with the optimizer state on it, past the wasm heap's budget: resume "
                            "the run from its last save" % reason)
        self._save = self._load = None
        self.training = self._last = self._copying = None
        self.epoch_end = self.stale = self._drop = False


    def resume(self, run: Any, size: int = 0, back: bool = False) -> Dict[str, Any]:
        """``run`` (the session's TrainingRun) goes back to its last good checkpoint, held by the worker, which hands it
        over range by range (:class:`pytrain.webapp.gpu_load.LoadStream`): after a lost device with the optimizer state
        on it (:attr:`renew`) was replaced by a new one, or (``back``) after a divergence (Session.restore_good).
        ``size`` (its length) starts; each answer asks for the range ``want`` copied into the heap at ``into``, and the
        next call takes it; at ``done`` the parameters are in the heap, the moments on the device, which trains on from
        there at the run's learning rate."""
        if size or back:
            good, module = run.good(), run.module
            if device() is None or (back and self.renew):   # (renew: lost, and no new one could be had)
                raise WebappError("the last good checkpoint holds the optimizer state past the wasm heap's budget, "
                                  "which only the GPU can take back, and there is no WebGPU device (none, lost or "
                                  "turned off): resume the run from its last save")
            if size <= 0 or not (self.renew or back) or good is None or good.checkpoint is not None or self.stale:
                raise PytrainError("no lost device or divergence to resume from a last good checkpoint the worker "
                                   "holds (size %d; or the GPU's state not read back first)" % size)
            run.resume(Position(good.epoch, good.epoch_step, good.step))
            if self.renew:
                device().renewed()   # (the lost device's constants are gone)
            self.training = self._last = self._copying = self._save = None   # (its moments go: the good's come up)
            module.state.optimizer_state.slots = {}   # (the checkpoint's go up one by one)
            self._load = LoadStream(size, module.state.parameters, lambda props, step: self._install(run, props, step))
            return self._load.ask()
        if self._load is None:
            raise PytrainError("no resume is under way (gpu_resume(size=...) first)")
        try:
            out = self._load.next()
        except PytrainError:
            self._load = self.training = None
            raise
        if out.get("done"):
            self._load, self.renew, self.refused, self.stale = None, False, None, False
            self._valid = Mark.now(run.module, run.at)
            run.apply_lr()
            out.update(run.position())
        return out

    def reopen(self, run: Any, size: int, batch: Sequence[Any]) -> Dict[str, Any]:
        """A saved run reopened (:func:`pytrain.webapp.saved_run.restore`) from its checkpoint the worker holds, handed
        over range by range as :meth:`resume` takes it (``size`` bytes; the later calls are resume's): its parameters
        into ``run``'s module (built from its artifacts), its moments, where the state must live on the GPU only at
        ``batch``'s step (:func:`check_heap`), each uploaded to the device and let go, else into the heap (no device,
        a model the GPU cannot train, or a state that fits): the heap never holds the checkpoint whole."""
        module = run.module
        if size <= 0:
            raise PytrainError("no checkpoint to reopen (size %d)" % size)
        gpu = None if device() is not None and not self.renew else False   # (a lost device not renewed: the heap)
        self.training = self._last = self._copying = self._save = None
        self.stale = self.renew = False
        try:   # (as a slice checks it: the step's memory at this batch size)
            self._estimate = module.memory_estimate(*batch, optimizer=run.optimizer)
        except PytrainError:
            self._estimate = None
        module.state.optimizer_state.slots = {}   # (the checkpoint's come in one by one)
        self._load = LoadStream(size, module.state.parameters, lambda props, step: self._install(run, props, step, gpu))
        return self._load.ask()

    def _install(self, run: Any, props: Properties, step: int, gpu: Optional[bool] = True) -> Callable[..., None]:
        """The checkpoint's properties and optimizer step into the CheckpointState (its parameters are in), and the
        device's training, its moments zeros until each streamed one replaces its own (the returned put); ``gpu``
        None (a saved run reopened): only where the state must live on the GPU only and can, else False: the put
        keeps them in the heap."""
        state = run.module.state
        state.properties.clear()
        state.properties.update(props)
        state.optimizer_state.step = step
        if gpu is None:
            gpu = self._estimate is not None and check_heap(run.module, self._estimate)
            self.refused = None   # (a new model: the device tries it, as a slice does)
            try:
                self.training = GpuTraining(run.module, run.optimizer, device(), self._estimate, keep_moments=True) \
                    if gpu else None
            except (InputError, GpuTransferError) as e:
                self.refused, self.training = str(e), None
        elif gpu:
            self.training = GpuTraining(run.module, run.optimizer, device(), self._estimate, keep_moments=True)
        if self.training is not None:
            return self.training.load_moment
        slots = state.optimizer_state.slots
        return lambda p, slot, a: slots.setdefault(p, {}).__setitem__(slot, np.array(a, copy=True))


class Mark(NamedTuple):
    """Where a CheckpointState's values are: the position, the optimizer's step count, the checkpoint's properties."""
    position: Tuple[int, int, int]
    optimizer_step: int
    properties: Dict[str, Any]

    @staticmethod
    def now(module: Any, at: Any) -> "Mark":
        return Mark((at.epoch, at.epoch_step, at.step), optimizer_step(module), dict(module.state.properties.items()))

    def restore(self, at: Any, module: Any) -> None:
        at.epoch, at.epoch_step, at.step = self.position
        module.state.optimizer_state.step = self.optimizer_step
        props = module.state.properties
        for k in [k for k in props if k not in self.properties]:
            del props[k]
        props.update(self.properties)


def optimizer_step(module: Any) -> int:
    opt = module.state.optimizer_state
    return int(opt.step) if opt is not None else 0


def check_heap(module: Any, est: Any) -> bool:
    """Whether the optimizer state must live on the GPU only (``keep_moments``): False when the parameters and the
    optimizer state fit what is left of the wasm heap's budget (the gradients and activations are GPU memory,
    checked against the device's); True when only the parameters and the largest moment do (a save streams the
    moments one by one, :mod:`pytrain.webapp.gpu_save`); else LimitError naming the bytes and the limit. A read back
    lands in arrays of its own before it replaces the heap's (never half: a device lost meanwhile leaves the last
    whole state), a passing copy of the trained parameters not counted, as a save's serialized copy is not."""
    need, held = heap_need(module, est)
    if est.parameters + est.optimizer_state <= limits.heap_budget(held)[1]:
        return False
    limits.check_heap(need, "training this model on the GPU keeps its parameters and the largest optimizer moment "
                      "in the wasm heap (%.1f MiB; the optimizer state, %.1f MiB, stays on the GPU)"
                      % (need / 2.0 ** 20, est.optimizer_state / 2.0 ** 20), held)
    return True


def heap_need(module: Any, est: Any) -> Tuple[int, int]:
    """The least the wasm heap holds for a GPU training (the parameters and the largest moment, a save's one at a
    time), and what of ``est`` the heap already holds."""
    params = module.state.parameters
    largest = max([params[n].data.nbytes for n in module.trainable_names] or [0]) if est.optimizer_state else 0
    return est.parameters + largest, module.held_bytes(est)
