"""Layer 9, webapp: the page's training slices on the WebGPU device (pytrain/device/webgpu.py), when the
page registered one (the user turned the GPU on: web/worker/boot.js installWebGPU).

A slice enqueues its steps and then the copy of the parameters and optimizer state back into the
CheckpointState, and returns at once; the worker's JS awaits the device (``settle()``) and then calls
the session's ``gpu_finish``, which hands over the slice's losses and does what the CPU slice does at
its end (the position saved, the good checkpoint kept at an epoch's end). Between slices the
CheckpointState is therefore current, so saving, evaluating, exporting and predicting work as on the CPU.
A model the GPU cannot train (an op without a shader reading a GPU tensor, running statistics) is
refused once, with the reason kept, and trains on the CPU.
"""
from __future__ import annotations

import time
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

from pytrain.device.webgpu import GpuTraining
from pytrain.errors import InputError, PytrainError
from pytrain.ops.webgpu import GpuTransferError, choice, device


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
        self._last: Optional[GpuTraining] = None   # the slice awaiting its losses
        self._start = (0, 0, 0, 0)   # (epoch, epoch_step, step, optimizer step) where that slice started
        self._choice = choice()   # the user's device choice this training was made under

    def describe(self) -> Optional[str]:
        """"GPU: <adapter>" when the page has a WebGPU device and the model trains there, else None."""
        dev = device()
        return None if dev is None or self.refused else "GPU: " + dev.adapter

    def _training(self, module: Any, optimizer: Any, batch: Sequence[Any]) -> Optional[GpuTraining]:
        t = self.training
        if t is None or t.module is not module or t.optimizer is not optimizer:
            try:   # (the step's memory at this batch size, checked against the GPU's before any upload)
                estimate = module.memory_estimate(*batch, optimizer=optimizer)
            except PytrainError:
                estimate = None
            try:
                self.training = GpuTraining(module, optimizer, device(), estimate)
            except (InputError, GpuTransferError) as e:
                self.refused, self.training = str(e), None
        return self.training

    def run(self, module: Any, optimizer: Any, at: Any, work: Slice) -> Optional[int]:
        """Enqueue the slice's steps from ``at`` (advanced in place); the number enqueued, or None when the
        device cannot train this model (``at`` unchanged: the CPU trains it)."""
        if self._choice != choice():   # turned off or on since: the CPU may have trained in between
            self._choice, self.training, self.refused = choice(), None, None
        if device() is None or self.refused:
            return None
        gpu = self._training(module, optimizer, work.fetch(work.batches[at.epoch_step]))
        if gpu is None:
            return None
        start, done = time.perf_counter(), 0
        self.epoch_end, self._last = False, gpu
        opt_state = module.state.optimizer_state
        self._start = (at.epoch, at.epoch_step, at.step, opt_state.step)
        while at.epoch_step < len(work.batches) and done < work.max_steps:
            try:
                gpu.step(*work.fetch(work.batches[at.epoch_step]))
            except GpuTransferError as e:   # (raised in the training plan: this step changed nothing)
                self.refused, self.training = str(e), None
                if done == 0:
                    return None
                break
            done += 1
            at.step += 1
            at.epoch_step += 1
            if at.epoch_step >= len(work.batches):
                at.epoch, at.epoch_step, self.epoch_end = at.epoch + 1, 0, True
                break
            if (time.perf_counter() - start) * 1000.0 >= work.budget_ms:
                break
        gpu.to_cpu()
        return done

    def finish(self) -> List[float]:
        """The last slice's losses, its parameters and moments put into the CheckpointState (call after the JS
        awaited the device)."""
        if self._last is None:
            return []
        self._last.commit()
        return self._last.take_losses()

    def lost(self, at: Any, module: Any, reason: str) -> None:
        """The device failed before the last slice came back: the slice is undone (the position and the
        optimizer's step count as at its start; the CheckpointState never took its copies) and the CPU trains
        from there on, with the same numbers."""
        self.refused = "the GPU failed (%s): the CPU trains from step %d" % (reason, self._start[2])
        if self._last is not None:
            at.epoch, at.epoch_step, at.step, module.state.optimizer_state.step = self._start
        self.training = self._last = None
        self.epoch_end = False
