"""The one training loop: a resumable generator of optimizer steps that the CLI, the page and a
Flower node drive.

:func:`steps` starts at any :class:`Position` (epoch, batch within the epoch, step count), takes
each epoch's batches from the driver (the CLI and the page: a shuffle drawn from (seed, epoch), see
:func:`epoch_batches`; Flower: its own per-round permutation), and yields a :class:`Step` after
every update, with the position already advanced (to the next epoch after its last batch). The
driver decides when to stop (a step or time budget, Ctrl-C, the end of a slice), when to validate
and when to save a checkpoint (``step.epoch_end``); stopping between two steps leaves the position
exactly where a later call resumes. A step whose loss or gradient is not finite raises
:class:`~pytrain.errors.DivergenceError` before any update; a :class:`LossWatch` refuses a finite
loss that exploded (:class:`LossExploded`, also before the update).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pytrain import data
from pytrain.errors import DivergenceError
from pytrain.run.evaluate import split_outputs

#: the batches (sample indices) of one epoch, by epoch number
Batches = Callable[[int], Sequence[np.ndarray]]
#: what the module takes for a batch of sample indices: (x, y), or every input of the training model in
#: order (a causal LM's ids alone: its loss reads its labels from them)
Fetch = Callable[[np.ndarray], Tuple[np.ndarray, ...]]


class Position:
    """Where a run is: completed epochs, batches done in the current epoch, steps in all, and what
    the loop is doing ("forward", "step" while parameters change, "idle")."""

    def __init__(self, epoch: int = 0, epoch_step: int = 0, step: int = 0) -> None:
        self.epoch = int(epoch)
        self.epoch_step = int(epoch_step)
        self.step = int(step)
        self.phase = "idle"


class Step(NamedTuple):
    """One optimizer step: the epoch and batch it trained (0-based), the step count after it, its
    loss, the batch's sample count, the learning rate it used, and whether it ended its epoch."""
    epoch: int
    batch: int
    step: int
    loss: float
    samples: int
    lr: float
    epoch_end: bool


class LossExploded(DivergenceError):
    """A finite loss far above where the run started: refused before the update."""

    def __init__(self, message: str, loss: float) -> None:
        super().__init__(message, reason=message, loss=loss)


class LossWatch:
    """What "exploding" is relative to: the median of the run's first losses."""

    FACTOR = 100   # a loss this many times its first values means the run diverged
    KEEP = 10

    def __init__(self) -> None:
        self.reference: List[float] = []

    def check(self, value: float) -> None:
        """Raise :class:`LossExploded` when ``value`` exploded (before its update is applied)."""
        if not self.reference:
            return
        ref = float(np.median(self.reference))
        if value > self.FACTOR * ref and value > ref + 10.0:
            raise LossExploded("the loss jumped to %.3g, over %d times its first value %.3g"
                               % (value, self.FACTOR, ref), value)

    def seen(self, value: float) -> None:
        """Record the loss of an applied step."""
        if len(self.reference) < self.KEEP:
            self.reference.append(value)


def epoch_batches(n: int, seed: int, epoch: int, batch_size: int) -> List[np.ndarray]:
    """The batches of ``epoch`` over ``n`` samples: a shuffle drawn from (seed, epoch), so a resumed
    run replays the interrupted one's."""
    return data.batch_indices(data.epoch_order(n, seed, epoch), batch_size)


def steps(module: Any, optimizer: Any, at: Position, batches: Batches, fetch: Fetch,
          epochs: Optional[int] = None, scheduler: Any = None, watch: Optional[LossWatch] = None) -> Iterator[Step]:
    """Train from ``at`` (advanced in place) until ``epochs`` epochs are complete (None: without
    end), yielding each :class:`Step`. ``batches`` is called once per epoch, when it starts. Before its
    first step, a run whose memory estimate (``module.check_memory``) is over
    ``pytrain.base.limits.max_heap_bytes`` is refused with :class:`~pytrain.errors.LimitError`."""
    checked = False
    while epochs is None or at.epoch < epochs:
        plan = batches(at.epoch)
        while at.epoch_step < len(plan):
            idx = plan[at.epoch_step]
            batch = fetch(idx)
            if not checked:
                module.check_memory(*batch, optimizer=optimizer)
                checked = True
            lr = float(optimizer.get_learning_rate())
            module.train()
            at.phase = "forward"
            loss, _ = split_outputs(module(*batch))   # DivergenceError: refused, nothing updated
            if watch is not None:
                watch.check(loss)
            at.phase = "step"
            optimizer.step()
            module.lazy_reset_grad()
            if scheduler is not None:
                scheduler.step()
            at.phase = "idle"
            if watch is not None:
                watch.seen(loss)
            batch, epoch = at.epoch_step, at.epoch
            at.step += 1
            at.epoch_step += 1
            if at.epoch_step < len(plan):
                yield Step(epoch, batch, at.step, loss, len(idx), lr, False)
                continue
            at.epoch, at.epoch_step = at.epoch + 1, 0
            yield Step(epoch, batch, at.step, loss, len(idx), lr, True)
            break
        else:   # no batch left in this epoch (an empty set, or fewer batches than the position had done)
            at.epoch, at.epoch_step = at.epoch + 1, 0
