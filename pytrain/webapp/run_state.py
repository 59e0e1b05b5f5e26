"""The page's run: the module and optimizer training, their settings (batch size, learning rate, seed), where
the run is (:class:`~pytrain.run.loop.Position`), the epoch's sample order and the last good checkpoint to go
back to after a divergence. The :class:`~pytrain.webapp.session.Session` owns one and gives it the data's size;
this room knows nothing of the page's data or artifacts."""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

from pytrain import data as _data
from pytrain.run import properties as P
from pytrain.run.loop import LossWatch, Position
from pytrain.webapp.common import WebappError
from pytrain.webapp.run_options import TAB_RUN


class Good(NamedTuple):
    """The last good checkpoint (taken when the model was built and after each epoch) and its position; ``checkpoint``
    None: the worker holds it (streamed with the optimizer state on the GPU only: Session.gpu_save(good=True))."""
    checkpoint: Optional[bytes]
    epoch: int
    epoch_step: int
    step: int

    def position(self) -> Dict[str, int]:
        return {"epoch": self.epoch, "step": self.step, "epoch_step": self.epoch_step}


class TrainingRun:
    """One model's training: module, optimizer and checkpoint state, settings, position and epoch order."""

    def __init__(self) -> None:
        self.seed, self.batch_size, self.lr = 0, TAB_RUN.batch_size, TAB_RUN.learning_rate
        self.state: Any = None
        self.module: Any = None
        self.optimizer: Any = None
        self.at = Position()    # completed epochs, batches done in the current epoch, batches in total
        self.watch = LossWatch()   # the run's first losses: what "exploding" is relative to
        self._order: Optional[np.ndarray] = None
        self._order_epoch = -1
        self._epoch_n = 0       # training-set size the current epoch's order was drawn for
        self._epoch_n_for = -1
        self._good: Optional[Good] = None     # what the page goes back to after a divergence

    # ------------------------------------------------------------ the model

    def start(self, state: Any, module: Any, optimizer: Any) -> None:
        """Train these from the start: position 0, no order drawn, a fresh loss watch, a first good checkpoint."""
        self.state, self.module, self.optimizer = state, module, optimizer
        self.at = Position()
        self.new_data()
        self.apply_lr()
        self.watch = LossWatch()
        self.remember_good()

    def need_model(self) -> None:
        """Raise the page's error when no model was built or uploaded yet."""
        if self.module is None:
            raise WebappError("no model yet: build or upload a model first")

    def use_optimizer(self, optimizer: Any) -> None:
        """Another optimizer on the same module (its moments start fresh)."""
        self.state.optimizer_state = None
        self.optimizer = optimizer
        self.apply_lr()

    # ------------------------------------------------------------ settings

    def configure(self, batch_size: Optional[int] = None, lr: Optional[float] = None,
                  seed: Optional[int] = None) -> Dict[str, Any]:
        """Set batch size, learning rate and shuffling seed (applies from the next step)."""
        if batch_size is not None:
            if int(batch_size) < 1:
                raise WebappError("batch size must be at least 1, got %s" % batch_size)
            if int(batch_size) != self.batch_size:
                self.batch_size = int(batch_size)
                self._order_epoch = -1
        if lr is not None:
            if not float(lr) > 0:
                raise WebappError("learning rate must be positive, got %s" % lr)
            self.lr = float(lr)
            self.apply_lr()
        if seed is not None:
            self.seed = int(seed)
        return {"batch_size": self.batch_size, "lr": self.lr, "seed": self.seed}

    def apply_lr(self) -> None:
        """Give the optimizer the run's learning rate."""
        if self.optimizer is not None and hasattr(self.optimizer, "set_learning_rate"):
            self.optimizer.set_learning_rate(self.lr)

    # ------------------------------------------------------------ position and epoch order

    def new_data(self) -> None:
        """A new data set: no epoch order drawn for it yet."""
        self._order_epoch = self._epoch_n_for = -1

    def resume(self, at: Position, epoch_n: Optional[int] = None) -> None:
        """Continue at ``at`` (a saved run's position); ``epoch_n``: the training-set size its current epoch's
        order was drawn for, when samples were added during it. The order is drawn again, the loss watch starts
        again."""
        self.at = at
        self._order_epoch = -1
        if epoch_n:
            self._epoch_n, self._epoch_n_for = int(epoch_n), at.epoch
        self.watch = LossWatch()

    def epoch_n(self) -> Optional[int]:
        """The training-set size the current epoch's order was drawn for (None before it was drawn)."""
        return self._epoch_n if self._epoch_n_for == self.at.epoch else None

    def batches(self, n_train: int) -> List[np.ndarray]:
        """The current epoch's batches of sample indices over ``n_train`` samples."""
        epoch = self.at.epoch
        if self._order_epoch != epoch or self._order is None:
            # Samples added mid-epoch join at the next epoch: the running epoch keeps the size it
            # started with (saved with the run, so a resumed run replays the same batches).
            n = self._epoch_n if self._epoch_n_for == epoch else int(n_train)
            self._order = _data.epoch_order(n, self.seed, epoch)
            self._order_epoch = epoch
            self._epoch_n, self._epoch_n_for = n, epoch
        return _data.batch_indices(self._order, self.batch_size)

    # ------------------------------------------------------------ checkpoints

    def save_progress(self) -> None:
        """Write the position and settings into the checkpoint's properties."""
        props = getattr(self.state, "properties", None)
        if props is None:
            return
        props[P.P_EPOCH] = int(self.at.epoch)
        props[P.P_EPOCH_STEP] = int(self.at.epoch_step)
        props[P.P_STEP] = int(self.at.step)
        props[P.P_BATCH_SIZE] = int(self.batch_size)
        props[P.P_LR] = float(self.lr)
        props[P.P_SEED] = int(self.seed)

    def checkpoint(self, include_optimizer_state: bool = True) -> bytes:
        """The current checkpoint (parameters, optimizer state, progress properties) as bytes."""
        self.need_model()
        self.save_progress()
        return bytes(self.state.to_bytes(include_optimizer_state=bool(include_optimizer_state)))

    def remember_good(self) -> None:
        """Keep the checkpoint of this step (model built, epoch ends) to go back to after a divergence."""
        at = self.at
        self._good = Good(self.checkpoint(), at.epoch, at.epoch_step, at.step)

    def good(self) -> Optional[Good]:
        """The last good checkpoint, if any."""
        return self._good

    def keep_good(self, good: Optional[Good]) -> None:
        """Go on with ``good`` as the last good checkpoint (after going back to it)."""
        self._good = good

    def last_good(self) -> Dict[str, Any]:
        """Position of the last good checkpoint (taken when the model was built and after each epoch)."""
        return self._good.position() if self._good is not None else {"epoch": 0, "step": 0, "epoch_step": 0}

    def position(self) -> Dict[str, int]:
        """Where the run is, as the page reads it."""
        return {"epoch": self.at.epoch, "step": self.at.step, "epoch_step": self.at.epoch_step}
