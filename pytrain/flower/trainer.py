"""What a node does with a ``train`` or ``evaluate`` message: a pytrain Module and Optimizer on
local data. Parameters travel by name (the checkpoint's names); nothing but parameters, the number
of examples and loss/accuracy ever leaves."""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from pytrain.errors import DivergenceError, InputError

Metrics = Dict[str, Any]


def parameter_names(module) -> List[str]:
    """The module's parameters (trainable, then frozen such as BatchNorm statistics), in order."""
    return list(module._names(False))


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
    """

    def __init__(self, module, optimizer, x: np.ndarray, y: np.ndarray, eval_x: Optional[np.ndarray] = None,
                 eval_y: Optional[np.ndarray] = None, epochs: int = 1, batch_size: int = 32,
                 lr: Optional[float] = None, seed: int = 0, loss_kind: str = "ce") -> None:
        if len(x) != len(y) or len(x) == 0:
            raise InputError("local data: %d samples but %d labels (need at least one of each)" % (len(x), len(y)))
        self.module, self.optimizer = module, optimizer
        self.x, self.y = x, y
        self.eval_x = x if eval_x is None else eval_x
        self.eval_y = y if eval_y is None else eval_y
        self.epochs, self.batch_size, self.lr, self.seed = int(epochs), int(batch_size), lr, int(seed)
        self.loss_kind = loss_kind
        self.names = parameter_names(module)
        self._params = module._state.parameters
        #: called between batches (the node heartbeats from here during long rounds)
        self.on_batch: Optional[Callable[[], None]] = None
        self.last_train_seconds = 0.0

    # -- parameters ------------------------------------------------------------------------------
    def get_parameters(self) -> "OrderedDict[str, np.ndarray]":
        return OrderedDict((n, np.array(self._params[n].data, copy=True)) for n in self.names)

    def check_parameters(self, arrays: Mapping[str, Any]) -> "Dict[str, np.ndarray]":
        """The server's arrays converted to the parameters' dtypes, or InputError saying why not."""
        got = set(arrays)
        want = set(self.names)
        if got != want:
            missing, extra = sorted(want - got), sorted(got - want)
            raise InputError("the server's parameters do not match this model: %s%s"
                             % ("missing %s" % missing[:5] if missing else "",
                                ("%sunknown %s" % ("; " if missing else "", extra[:5])) if extra else ""))
        out = {}
        for n in self.names:
            a = np.asarray(arrays[n])
            p = self._params[n]
            if tuple(a.shape) != tuple(p.shape):
                raise InputError("parameter %r: the server sent shape %s, the model's is %s"
                                 % (n, list(a.shape), list(p.shape)))
            if a.dtype.kind not in "biuf" or (p.dtype.kind == "f" and a.dtype.kind != "f"):
                raise InputError("parameter %r: the server sent %s values for a %s parameter" % (n, a.dtype, p.dtype))
            if a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
                raise InputError("parameter %r: the server sent NaN or infinite values" % n)
            out[n] = a.astype(p.dtype, copy=False)
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
        self.set_parameters(arrays)
        before = self.get_parameters()
        if lr is not None:
            self.optimizer.set_learning_rate(lr)
        rnd = int(config.get("server-round", 0)) if isinstance(config.get("server-round", 0), int) else 0
        rng = np.random.RandomState((self.seed * 100003 + rnd) % (2 ** 32))
        module = self.module
        module.train()
        total, seen = 0.0, 0
        t0 = time.monotonic()
        try:
            for _ in range(epochs):
                order = rng.permutation(len(self.x))
                for i in range(0, len(order), bs):
                    idx = order[i:i + bs]
                    out = module(self.x[idx], self.y[idx])
                    loss = out[0] if isinstance(out, (list, tuple)) else out
                    self.optimizer.step()
                    module.lazy_reset_grad()
                    total += float(np.asarray(loss).reshape(-1)[0]) * len(idx)
                    seen += len(idx)
                    if self.on_batch is not None:
                        self.on_batch()
        except DivergenceError:
            self.set_parameters(before)  # never send, nor keep, a diverged model
            module.lazy_reset_grad()
            raise
        # FedAvg aggregates only when every reply has the same metric names: flwr's own templates'
        metrics: Metrics = OrderedDict([("train_loss", total / max(seen, 1)), ("num-examples", len(self.x))])
        self.last_train_seconds = time.monotonic() - t0
        return self.get_parameters(), len(self.x), metrics

    def evaluate(self, arrays: Mapping[str, Any], config: Mapping[str, Any]) -> Tuple[int, Metrics]:
        self.set_parameters(arrays)
        loss, acc = self.local_metrics(self.eval_x, self.eval_y)
        metrics: Metrics = OrderedDict([("eval_loss", loss), ("num-examples", len(self.eval_x))])
        if acc is not None:
            metrics["eval_acc"] = acc
        return len(self.eval_x), metrics

    def local_metrics(self, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> Tuple[float, Optional[float]]:
        """(mean loss, accuracy or None) of the current parameters on ``x, y``."""
        module = self.module
        module.eval()
        total, hits, have_out = 0.0, 0.0, True
        for i in range(0, len(x), batch_size):
            xb, yb = x[i:i + batch_size], y[i:i + batch_size]
            res = module(xb, yb)
            if isinstance(res, (list, tuple)):
                loss, out = res[0], np.asarray(res[1]) if len(res) > 1 else None
            else:
                loss, out = res, None
            total += float(np.asarray(loss).reshape(-1)[0]) * len(yb)
            if out is None:
                have_out = False
            elif self.loss_kind == "ce":
                hits += float(np.sum(out.reshape(len(yb), -1).argmax(axis=1) == yb))
            elif self.loss_kind == "bce":
                hits += float(((out > 0) == (yb > 0.5)).reshape(len(yb), -1).mean(axis=1).sum())
            else:
                have_out = False
        module.train()
        n = max(len(x), 1)
        return total / n, (hits / n if have_out else None)
