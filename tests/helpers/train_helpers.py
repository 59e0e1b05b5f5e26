"""The training loop the tests share: ORT's API, one optimizer step per batch."""
from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.device.api import CheckpointState, Module, Optimizer


def train_steps(arts, batches: Iterable[Tuple[Any, np.ndarray]], lr: Optional[float] = None,
                state: Optional[CheckpointState] = None,
                before_step: Optional[Callable[[int, CheckpointState], None]] = None
                ) -> Tuple[List[float], CheckpointState]:
    """Train ``arts`` (an Artifacts) one step per (x, y) batch; returns the losses and the state.

    x is an array, or a tuple of arrays for a model with several inputs; ``before_step(i, state)``
    runs before step i (e.g. to copy a reference's weights in)."""
    state = state if state is not None else CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    if lr is not None:
        opt.set_learning_rate(lr)
    losses = []
    for i, (x, y) in enumerate(batches):
        if before_step is not None:
            before_step(i, state)
        out = module(*(x if isinstance(x, tuple) else (x,)), y)
        losses.append(float(out[0] if isinstance(out, list) else out))  # the loss, then any extra outputs
        opt.step()
        module.lazy_reset_grad()
    return losses, state


def repeat_steps(module: Module, optimizer: Optimizer, feeds: Sequence[Any], count: int) -> List[float]:
    """``count`` optimizer steps of ``module`` on the same ``feeds`` (every input of the training model, labels
    included); the losses."""
    losses = []
    for _ in range(count):
        module.train()
        out = module(*feeds)
        losses.append(float(np.asarray(out[0] if isinstance(out, list) else out)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses
