"""The options of a training run in the tab, spelled once.

The widget, the page and the worker send only what their user set; :func:`resolve` fills the rest from
:class:`TabRun`'s defaults (the widget's documented ones: 5 epochs, batch 32, learning rate 0.005, AdamW,
one hidden layer of 32, no IndexedDB), and the worker's loop reads the resolved options back. The page's
own first values (its inputs in ``web/index.html``) are :data:`PAGE`."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from pytrain.webapp.common import OPTIMIZERS, WebappError


class TabRun:
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

    #: the options' names (a plain read-only class, not a dataclass: ``dataclasses`` imports ``copy`` and
    #: ``inspect``, which the tab's first stdlib part leaves to the part fetched after the first step)
    NAMES = ("epochs", "batch_size", "learning_rate", "optimizer", "hidden", "persist", "budget_ms",
             "save_every_ms", "seed")

    def __init__(self, **given: Any) -> None:
        unknown = sorted(set(given) - set(self.NAMES))
        if unknown:
            raise TypeError("TabRun has no option(s) %s" % ", ".join(unknown))
        for k, v in given.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TabRun is read-only: replace() makes a changed copy")

    def replace(self, **given: Any) -> "TabRun":
        """A copy with ``given`` changed."""
        return TabRun(**dict({k: getattr(self, k) for k in self.NAMES}, **given))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TabRun) and all(getattr(self, k) == getattr(other, k) for k in self.NAMES)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, k) for k in self.NAMES))

    def __repr__(self) -> str:
        return "TabRun(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.NAMES)

    def as_dict(self) -> Dict[str, Any]:
        """The options as the worker reads them (snake_case names; it turns them to camelCase)."""
        out = {k: getattr(self, k) for k in self.NAMES}
        out["hidden"] = list(self.hidden)
        return out


#: the page's first values: its "Train until epoch", batch size, learning rate and hidden layers inputs
#: (web/index.html, checked against this by tests/web/test_run_options.py); the page saves its runs
PAGE = TabRun(epochs=3, batch_size=64, learning_rate=0.002, persist=True)

_NAMES = frozenset(TabRun.NAMES)


def resolve(given: Dict[str, Any], base: TabRun = TabRun()) -> TabRun:
    """``base`` with what the caller set in ``given`` (None: unset); refuses unknown names and bad values."""
    unknown = sorted(set(given) - _NAMES)
    if unknown:
        raise WebappError("unknown training option(s) %s; known: %s" % (", ".join(unknown), ", ".join(sorted(_NAMES))))
    opts = base.replace(**{k: v for k, v in given.items() if v is not None})
    if int(opts.epochs) < 1:
        raise WebappError("epochs must be at least 1, got %s" % opts.epochs)
    if int(opts.batch_size) < 1:
        raise WebappError("batch size must be at least 1, got %s" % opts.batch_size)
    if not float(opts.learning_rate) > 0:
        raise WebappError("learning rate must be positive, got %s" % opts.learning_rate)
    if opts.optimizer not in OPTIMIZERS:
        raise WebappError("optimizer must be one of %s, got %r" % (", ".join(OPTIMIZERS), opts.optimizer))
    return opts.replace(epochs=int(opts.epochs), batch_size=int(opts.batch_size),
                   learning_rate=float(opts.learning_rate), hidden=tuple(int(h) for h in opts.hidden),
                   persist=bool(opts.persist))
