"""What a node does with a ``train`` or ``evaluate`` message: a pytrain Module and Optimizer on
local data. Parameters travel by name (the checkpoint's names); nothing but parameters, the number
of examples and loss/accuracy ever leaves."""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from pytrain import data
from pytrain.errors import DivergenceError, InputError
from pytrain.flower import privacy
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


class PytrainTrainer:
    """Local training and evaluation for a federation.

    ``x, y``: the local training data; ``eval_x, eval_y``: local evaluation data (default: the
    training data). ``epochs``, ``batch_size`` and ``lr`` are defaults that the server's
    ConfigRecord overrides per round (``local-epochs``, ``batch-size``, ``lr``/``learning-rate``).

    Differential privacy (:mod:`pytrain.flower.privacy`): when the server's train config carries
    ``clipping_norm`` (``DifferentialPrivacyClientSideFixedClipping``), the update sent is clipped to it
    as flwr's ``fixedclipping_mod`` does; ``require_clipping=True`` refuses train messages without it.
    ``local_dp`` (a :class:`~pytrain.flower.privacy.LocalDp`) clips and noises every update as flwr's
    ``LocalDpMod``. The local model then holds what was sent; ``last_privacy`` says what was done.
    """

    def __init__(self, module, optimizer, x: np.ndarray, y: np.ndarray, eval_x: Optional[np.ndarray] = None,
                 eval_y: Optional[np.ndarray] = None, epochs: int = 1, batch_size: int = 32,
                 lr: Optional[float] = None, seed: int = 0, loss_kind: str = "ce",
                 local_dp: Optional[privacy.LocalDp] = None, require_clipping: bool = False) -> None:
        if len(x) != len(y) or len(x) == 0:
            raise InputError("local data: %d samples but %d labels (need at least one of each)" % (len(x), len(y)))
        self.module, self.optimizer = module, optimizer
        self.x, self.y = x, y
        self.eval_x = x if eval_x is None else eval_x
        self.eval_y = y if eval_y is None else eval_y
        self.epochs, self.batch_size, self.lr, self.seed = int(epochs), int(batch_size), lr, int(seed)
        self.loss_kind = loss_kind
        self.local_dp, self.require_clipping = local_dp, bool(require_clipping)
        #: what differential privacy did to the last update sent (None: nothing), for the node's log
        self.last_privacy: Optional[Dict[str, Any]] = None
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
        epochs = _config_number(config, ("local-epochs", "epochs"), self.epochs, int)
        bs = _config_number(config, ("batch-size", "batch_size"), self.batch_size, int)
        lr = _config_number(config, ("lr", "learning-rate"), self.lr, float)
        clipping_norm = privacy.server_clipping_norm(config, self.require_clipping)  # before any work
        self.last_privacy = None
        self.set_parameters(arrays)
        before = self.get_parameters()
        if lr is not None:
            self.optimizer.set_learning_rate(lr)
        rnd = int(config.get("server-round", 0)) if isinstance(config.get("server-round", 0), int) else 0
        rng = np.random.RandomState((self.seed * 100003 + rnd) % (2 ** 32))
        n = len(self.x)
        total, seen = 0.0, 0
        t0 = time.monotonic()
        # a round's own shuffle per epoch (drawn in order from the round's generator)
        plan = steps(self.module, self.optimizer, Position(), lambda epoch: data.batch_indices(rng.permutation(n), bs),
                     lambda idx: (self.x[idx], self.y[idx]), epochs)
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
        # FedAvg aggregates only when every reply has the same metric names: flwr's own templates'
        metrics: Metrics = OrderedDict([("train_loss", total / max(seen, 1)), ("num-examples", len(self.x))])
        self.last_train_seconds = time.monotonic() - t0
        sent, self.last_privacy = privacy.private_update(before, self.get_parameters(), clipping_norm,
                                                         self.local_dp)
        if self.last_privacy is not None:
            self.set_parameters(sent)  # the local model (and DIR/checkpoint) is what was sent
        return sent, len(self.x), metrics

    def evaluate(self, arrays: Mapping[str, Any], config: Mapping[str, Any]) -> Tuple[int, Metrics]:
        self.set_parameters(arrays)
        loss, acc = self.local_metrics(self.eval_x, self.eval_y)
        metrics: Metrics = OrderedDict([("eval_loss", loss), ("num-examples", len(self.eval_x))])
        if acc is not None:
            metrics["eval_acc"] = acc
        return len(self.eval_x), metrics

    def local_metrics(self, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> Tuple[float, Optional[float]]:
        """(mean loss, accuracy or None) of the current parameters on ``x, y``."""
        metric = batch_metric("accuracy", self.loss_kind) if self.loss_kind in ("ce", "bce") else None
        ev = evaluate(self.module, x, y, batch_size, metric=metric)
        return ev.loss, ev.metric
