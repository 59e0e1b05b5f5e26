"""What a node does with a ``train`` or ``evaluate`` message: a pytrain Module and Optimizer on
local data. Parameters travel by name (the checkpoint's names); nothing but parameters, the number
of examples and loss/accuracy ever leaves."""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Protocol, Tuple

import numpy as np

from pytrain import data
from pytrain.errors import DivergenceError, InputError
from pytrain.run.evaluate import batch_metric, evaluate
from pytrain.run.loop import Position, steps

Metrics = Dict[str, Any]


def parameter_names(module) -> List[str]:
    """The module's parameters (trainable, then frozen such as BatchNorm statistics), in order."""
    return list(module.parameter_names)


def _config_number(config: Mapping[str, Any], keys: Tuple[str, ...], default: Any, kind: type) -> Any:
    for k in keys:
        if k in config:
            v = config[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InputError("config %r must be a number, got %r" % (k, v))
            v = kind(v)
            if not (math.isfinite(v) and v > 0):
                raise InputError("config %r must be positive, got %r" % (k, v))
            return v
    return default


class LocalTraining(NamedTuple):
    """A trainer's defaults for each round, which the server's ConfigRecord overrides per round
    (``local-epochs``, ``batch-size``, ``lr``/``learning-rate``); ``seed`` draws each round's shuffle;
    ``loss_kind`` ("ce", "bce", else no accuracy) says how evaluation judges accuracy."""
    epochs: int = 1
    batch_size: int = 32
    lr: Optional[float] = None
    seed: int = 0
    loss_kind: str = "ce"

    def for_round(self, config: Mapping[str, Any]) -> "LocalTraining":
        """These defaults with what the server's ``config`` sets for this round (checked: positive numbers)."""
        return self._replace(epochs=_config_number(config, ("local-epochs", "epochs"), self.epochs, int),
                             batch_size=_config_number(config, ("batch-size", "batch_size"), self.batch_size, int),
                             lr=_config_number(config, ("lr", "learning-rate"), self.lr, float))


class Trainer(Protocol):
    """What a :class:`~pytrain.flower.node.FlowerNode` needs of its trainer (:class:`PytrainTrainer` is one)."""

    #: the model's parameters by name, in order (flwr's legacy messages send them by position)
    names: List[str]
    #: called between batches of a long round, when set (a blocking node heartbeats from there)
    on_batch: Optional[Callable[[], None]]

    def fit(self, arrays: Mapping[str, Any], config: Mapping[str, Any]
            ) -> Tuple["OrderedDict[str, np.ndarray]", int, Metrics]: ...

    def evaluate(self, arrays: Mapping[str, Any], config: Mapping[str, Any]) -> Tuple[int, Metrics]: ...

    def check_declared(self, declared: Mapping[str, Tuple[Tuple[int, ...], Any]]) -> None: ...

    def check_parameters(self, arrays: Mapping[str, Any]) -> "Dict[str, np.ndarray]": ...

    def set_parameters(self, arrays: Mapping[str, Any]) -> None: ...


class PytrainTrainer:
    """Local training and evaluation for a federation (a :class:`Trainer`).

    ``x, y``: the local training data; ``eval_x, eval_y``: local evaluation data (default: the
    training data); ``settings``: the rounds' defaults (:class:`LocalTraining`). Differential privacy
    and secure aggregation wrap the trainer as the node's mods (:mod:`pytrain.flower.mods`).
    """

    def __init__(self, module: Any, optimizer: Any, x: np.ndarray, y: np.ndarray, eval_x: Optional[np.ndarray] = None,
                 eval_y: Optional[np.ndarray] = None, settings: Optional[LocalTraining] = None) -> None:
        if len(x) != len(y) or len(x) == 0:
            raise InputError("local data: %d samples but %d labels (need at least one of each)" % (len(x), len(y)))
        self.module, self.optimizer = module, optimizer
        self.x, self.y = x, y
        self.eval_x = x if eval_x is None else eval_x
        self.eval_y = y if eval_y is None else eval_y
        self.settings = settings if settings is not None else LocalTraining()
        self.names = parameter_names(module)
        self._params = module.state.parameters
        #: called between batches (the node heartbeats from here during long rounds)
        self.on_batch: Optional[Callable[[], None]] = None
        self.last_train_seconds = 0.0

    # -- parameters ------------------------------------------------------------------------------
    def get_parameters(self) -> "OrderedDict[str, np.ndarray]":
        return OrderedDict((n, np.array(self._params[n].data, copy=True)) for n in self.names)

    def check_declared(self, declared: Mapping[str, Tuple[Tuple[int, ...], Any]]) -> None:
        """InputError unless ``declared`` (name -> (shape, dtype)) is exactly this model's parameters:
        what the server's arrays say they are, checked before their data is fetched."""
        got = set(declared)
        want = set(self.names)
        if got != want:
            missing, extra = sorted(want - got), sorted(got - want)
            raise InputError("the server's parameters do not match this model: %s%s"
                             % ("missing %s" % missing[:5] if missing else "",
                                ("%sunknown %s" % ("; " if missing else "", extra[:5])) if extra else ""))
        for n in self.names:
            shape, dtype = declared[n]
            dtype = np.dtype(dtype)
            p = self._params[n]
            if tuple(shape) != tuple(p.shape):
                raise InputError("parameter %r: the server sent shape %s, the model's is %s"
                                 % (n, list(shape), list(p.shape)))
            if dtype.kind not in "biuf" or (p.dtype.kind == "f" and dtype.kind != "f"):
                raise InputError("parameter %r: the server sent %s values for a %s parameter" % (n, dtype, p.dtype))

    def check_parameters(self, arrays: Mapping[str, Any]) -> "Dict[str, np.ndarray]":
        """The server's arrays converted to the parameters' dtypes, or InputError saying why not."""
        arrays = {n: np.asarray(a) for n, a in arrays.items()}
        self.check_declared({n: (a.shape, a.dtype) for n, a in arrays.items()})
        out = {}
        for n in self.names:
            a = arrays[n]
            if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
                raise InputError("parameter %r: the server sent NaN or infinite values" % n)
            out[n] = a.astype(self._params[n].dtype, copy=False)
        return out

    def set_parameters(self, arrays: Mapping[str, Any]) -> None:
        """All or nothing: every array is checked before any parameter changes."""
        checked = self.check_parameters(arrays)
        for n, a in checked.items():
            np.copyto(self._params[n].data, a)

    # -- the two tasks -----------------------------------------------------------------------------
    def fit(self, arrays: Mapping[str, Any], config: Mapping[str, Any]) -> Tuple["OrderedDict[str, np.ndarray]", int, Metrics]:
        """Train from the server's ``arrays`` with this round's ``config``: (parameters, examples, metrics)."""
        settings = self.settings.for_round(config)
        self.set_parameters(arrays)
        sr = config.get("server-round", 0)
        loss = self.train(settings, int(sr) if isinstance(sr, int) else 0)
        # FedAvg aggregates only when every reply has the same metric names: flwr's own templates'
        metrics: Metrics = OrderedDict([("train_loss", loss), ("num-examples", len(self.x))])
        return self.get_parameters(), len(self.x), metrics

    def train(self, settings: LocalTraining, server_round: int = 0) -> float:
        """The local epochs of one round from the current parameters; returns the mean loss. A diverged
        round leaves the parameters as they were and raises."""
        before = self.get_parameters()
        if settings.lr is not None:
            self.optimizer.set_learning_rate(settings.lr)
        rng = np.random.RandomState((settings.seed * 100003 + server_round) % (2 ** 32))
        n, bs = len(self.x), settings.batch_size
        total, seen = 0.0, 0
        t0 = time.monotonic()
        # a round's own shuffle per epoch (drawn in order from the round's generator)
        plan = steps(self.module, self.optimizer, Position(), lambda epoch: data.batch_indices(rng.permutation(n), bs),
                     lambda idx: (self.x[idx], self.y[idx]), settings.epochs)
        try:
            for st in plan:
                total += st.loss * st.samples
                seen += st.samples
                if self.on_batch is not None:
                    self.on_batch()
        except DivergenceError:
            self.set_parameters(before)  # never send, nor keep, a diverged model
            self.module.lazy_reset_grad()
            raise
        self.last_train_seconds = time.monotonic() - t0
        return total / max(seen, 1)

    def evaluate(self, arrays: Mapping[str, Any], config: Mapping[str, Any]) -> Tuple[int, Metrics]:
        self.set_parameters(arrays)
        loss, acc = self.local_metrics(self.eval_x, self.eval_y)
        metrics: Metrics = OrderedDict([("eval_loss", loss), ("num-examples", len(self.eval_x))])
        if acc is not None:
            metrics["eval_acc"] = acc
        return len(self.eval_x), metrics

    def local_metrics(self, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> Tuple[float, Optional[float]]:
        """(mean loss, accuracy or None) of the current parameters on ``x, y``."""
        kind = self.settings.loss_kind
        metric = batch_metric("accuracy", kind) if kind in ("ce", "bce") else None
        ev = evaluate(self.module, x, y, batch_size, metric=metric)
        return ev.loss, ev.metric
