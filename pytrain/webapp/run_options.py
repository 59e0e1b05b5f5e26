"""The options of a training run in the tab, spelled once.

The widget, the page and the worker send only what their user set; :meth:`TabRun.with_given` fills the rest
from :class:`TabRun`'s defaults (the widget's documented ones: 5 epochs, batch 32, learning rate 0.005, AdamW,
one hidden layer of 32, no IndexedDB), and the worker's loop reads the resolved options back. The page's
own first values (its inputs in ``web/index.html``) are :data:`PAGE`."""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from pytrain.webapp.common import OPTIMIZERS, WebappError


class TabRun(NamedTuple):
    """A training run in the tab: how long, on what batches, how fast, and how the worker's loop paces it."""

    epochs: int = 5                    #: the run's total: training stops once it has trained this many epochs
    batch_size: int = 32
    learning_rate: float = 0.005
    optimizer: str = "AdamW"           #: one of common.OPTIMIZERS
    hidden: Tuple[int, ...] = (32,)    #: a table's MLP: its hidden layers' sizes
    persist: bool = False              #: save a resumable run in IndexedDB (after each epoch, on pause and stop)
    budget_ms: float = 150.0           #: one slice of steps between the worker's answers to pause, stop, predict
    save_every_ms: float = 10000.0     #: with ``persist``, also saved this often within an epoch
    seed: Optional[int] = None         #: the shuffling seed; None keeps the run's

    def as_dict(self) -> Dict[str, Any]:
        """The options as the worker reads them (snake_case names; it turns them to camelCase)."""
        return dict(self._asdict(), hidden=list(self.hidden))

    def with_given(self, given: Dict[str, Any]) -> "TabRun":
        """These options with what the caller set in ``given`` (None: unset), checked; refuses unknown names."""
        unknown = sorted(set(given) - set(self._fields))
        if unknown:
            raise WebappError("unknown training option(s) %s; known: %s"
                              % (", ".join(unknown), ", ".join(sorted(self._fields))))
        return self._replace(**{k: v for k, v in given.items() if v is not None}).checked()

    def checked(self) -> "TabRun":
        """These options with their numbers and flags as their types; refuses bad values by name."""
        if int(self.epochs) < 1:
            raise WebappError("epochs must be at least 1, got %s" % self.epochs)
        if int(self.batch_size) < 1:
            raise WebappError("batch size must be at least 1, got %s" % self.batch_size)
        if not float(self.learning_rate) > 0:
            raise WebappError("learning rate must be positive, got %s" % self.learning_rate)
        if self.optimizer not in OPTIMIZERS:
            raise WebappError("optimizer must be one of %s, got %r" % (", ".join(OPTIMIZERS), self.optimizer))
        return self._replace(epochs=int(self.epochs), batch_size=int(self.batch_size),
                             learning_rate=float(self.learning_rate), hidden=tuple(int(h) for h in self.hidden),
                             persist=bool(self.persist))


#: the defaults, for the functions whose own defaults are a tab run's (a NamedTuple, not a dataclass:
#: ``dataclasses`` imports ``copy`` and ``inspect``, which the tab's first stdlib part leaves to the part
#: fetched after the first step)
TAB_RUN = TabRun()

#: the page's first values: its "Train until epoch", batch size, learning rate and hidden layers inputs
#: (web/index.html, checked against this by tests/web/test_run_options.py); the page saves its runs
PAGE = TabRun(epochs=3, batch_size=64, learning_rate=0.002, persist=True)
