"""Differential privacy on the node: the client side of Flower's DP strategies (flwr 1.42).

- **Fixed clipping** (what flwr's ``fixedclipping_mod`` does for a ServerApp wrapped in
  ``DifferentialPrivacyClientSideFixedClipping``): the server puts the clipping norm in the train
  message's ConfigRecord under ``clipping_norm``; the node clips its *update* (trained parameters
  minus the ones it received) to that L2 norm over all arrays together and sends received + clipped
  update. The server adds the noise.
- **Local DP** (flwr's ``LocalDpMod``): the node clips its update to its own norm, then adds Gaussian
  noise of standard deviation ``sensitivity * sqrt(2 ln(1.25/delta)) / epsilon`` to every value.

Both follow flwr's arithmetic (``flwr.supercore.differential_privacy``: ``get_norm``,
``clip_inputs_inplace``, ``compute_clip_model_update``, ``add_gaussian_noise_inplace``) step for step,
so the same update gives the same bytes; the noise comes from a ``numpy.random.RandomState`` (the
generator ``np.random.normal`` uses), so a seeded ``LocalDp`` draws exactly what flwr draws after
``np.random.seed`` with that seed. They apply to train replies only; local DP runs first and the
server's clipping last (flwr: "fixedclipping_mod should be the last to operate on params").
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from pytrain.errors import InputError

#: flwr.supercore.differential_privacy.KEY_CLIPPING_NORM: where DifferentialPrivacyClientSideFixedClipping
#: puts the clipping norm in the train message's ConfigRecord
KEY_CLIPPING_NORM = "clipping_norm"

def _number(what: str, v: Any) -> float:
    """``v`` as a finite float, or InputError naming ``what``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InputError("%s must be a number, got %r" % (what, v))
    f = float(v)
    if not math.isfinite(f):
        raise InputError("%s must be finite, got %r" % (what, v))
    return f


def server_clipping_norm(config: Mapping[str, Any], required: bool = False) -> Optional[float]:
    """The clipping norm the server sent (``config['clipping_norm']``, positive and finite), None when it
    sent none; InputError naming the key when it is not a positive number, or when it is missing and
    ``required`` (as flwr's ``fixedclipping_mod`` refuses such a message)."""
    if KEY_CLIPPING_NORM not in config:
        if required:
            raise InputError("the server's config has no %r: this node clips its updates for central DP "
                             "with client-side clipping, so the ServerApp must wrap its strategy in "
                             "DifferentialPrivacyClientSideFixedClipping" % KEY_CLIPPING_NORM)
        return None
    norm = _number("config %r" % KEY_CLIPPING_NORM, config[KEY_CLIPPING_NORM])
    if norm <= 0:
        raise InputError("config %r must be positive, got %r" % (KEY_CLIPPING_NORM, config[KEY_CLIPPING_NORM]))
    return norm


def update_norm(arrays: List[np.ndarray]) -> float:
    """flwr's ``get_norm``: the L2 norm of all the arrays flattened together."""
    norms = [np.linalg.norm(a.flat) for a in arrays]
    return float(np.sqrt(sum([n ** 2 for n in norms])))


def clip_update(received: Mapping[str, np.ndarray], trained: Mapping[str, np.ndarray],
                clipping_norm: float) -> Tuple["OrderedDict[str, np.ndarray]", float, float]:
    """flwr's ``compute_clip_model_update``: ``received + update * min(1, clipping_norm / |update|)``
    where ``update = trained - received``, in ``trained``'s order. Returns (parameters, |update|,
    scale). An update of norm 0 is sent as it is (flwr divides by zero there)."""
    names = list(trained)
    update = [np.subtract(trained[n], received[n]) for n in names]
    norm = update_norm(update)
    scale = min(1, clipping_norm / norm) if norm > 0 else 1
    for n, u in zip(names, update):
        if scale != 1 and u.dtype.kind != "f":
            raise InputError("parameter %r (%s) cannot be clipped: only floating-point updates scale"
                             % (n, u.dtype))
        u *= scale
    out = OrderedDict((n, np.asarray(received[n]) + u) for n, u in zip(names, update))
    return out, norm, float(scale)


class LocalDp:
    """Local differential privacy as flwr's ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)``:
    each training reply's update is clipped to ``clipping_norm``, then every value gets Gaussian noise
    of standard deviation ``sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon``.

    ``seed`` (or ``rng``, a ``numpy.random.RandomState``) makes the noise reproducible, for tests; by
    default it is seeded from the operating system. Stricter than flwr where flwr's values make no
    sense: epsilon must be > 0 and delta within (0, 1) (flwr accepts 0, which gives infinite noise)."""

    def __init__(self, clipping_norm: float, sensitivity: float, epsilon: float, delta: float,
                 seed: Optional[int] = None, rng: Optional[np.random.RandomState] = None) -> None:
        self.clipping_norm = _number("local DP clipping norm", clipping_norm)
        self.sensitivity = _number("local DP sensitivity", sensitivity)
        self.epsilon = _number("local DP epsilon", epsilon)
        self.delta = _number("local DP delta", delta)
        if self.clipping_norm <= 0:
            raise InputError("local DP clipping norm must be positive, got %r" % clipping_norm)
        if self.sensitivity < 0:
            raise InputError("local DP sensitivity must not be negative, got %r" % sensitivity)
        if self.epsilon <= 0:
            raise InputError("local DP epsilon must be positive, got %r" % epsilon)
        if not 0 < self.delta < 1:
            raise InputError("local DP delta must be within (0, 1), got %r" % delta)
        # flwr's expression, evaluated the same way
        self.noise_std = self.sensitivity * np.sqrt(2 * np.log(1.25 / self.delta)) / self.epsilon
        self.rng = rng if rng is not None else np.random.RandomState(seed)

    def __repr__(self) -> str:
        return "LocalDp(clipping_norm=%g, sensitivity=%g, epsilon=%g, delta=%g)" % (
            self.clipping_norm, self.sensitivity, self.epsilon, self.delta)

    def apply(self, received: Mapping[str, np.ndarray], trained: Mapping[str, np.ndarray]
              ) -> Tuple["OrderedDict[str, np.ndarray]", float, float]:
        """(clipped and noised parameters, |update|, scale)."""
        out, norm, scale = clip_update(received, trained, self.clipping_norm)
        for a in out.values():  # flwr's add_gaussian_noise_inplace
            a += self.rng.normal(0, self.noise_std, a.shape).astype(a.dtype)
        return out, norm, scale


def describe(report: Optional[Mapping[str, Any]]) -> str:
    """One line for the node's log: what privacy did to the update (empty when nothing)."""
    if not report:
        return ""
    parts = ["update norm %.4g" % report["update_norm"]]
    if "noise_std" in report:
        parts.append("local DP: clipped to %.4g, Gaussian noise std %.4g"
                     % (report["local_dp_clipping_norm"], report["noise_std"]))
    if "clipping_norm" in report:
        parts.append("clipped to the server's norm %.4g%s" % (
            report["clipping_norm"], "" if report["scale"] < 1 else " (within it already)"))
    return "; ".join(parts)
