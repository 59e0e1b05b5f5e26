"""The training loop the tests share: ORT's API, one optimizer step per batch."""
from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

import numpy as np

from pytrain.api import CheckpointState, Module, Optimizer


def train_steps(arts, batches: Iterable[Tuple[np.ndarray, np.ndarray]], lr: Optional[float] = None,
                state: Optional[CheckpointState] = None) -> Tuple[List[float], CheckpointState]:
    """Train ``arts`` (an Artifacts) one step per (x, y) batch; returns the losses and the state."""
    state = state if state is not None else CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    if lr is not None:
        opt.set_learning_rate(lr)
    losses = []
    for x, y in batches:
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()
    return losses, state
