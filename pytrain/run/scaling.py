"""The run's scaler: features standardised and regression targets learnt in standard units, by the
column statistics of :func:`pytrain.data.scaling.column_stats` (one constant-column rule for both),
applied in float32 the same way in the CLI, the page and the run file, and built into the exported
model so it takes raw rows and answers in the target's own units.

Two forms of the same numbers: the page keeps ``{"x_mean", "x_std", "y_mean", "y_std"}`` (float64
lists, JSON-able, in its model description); a checkpoint keeps :data:`P_STANDARDIZER` (a
:class:`~pytrain.data.Standardizer`) and :data:`P_TARGET_SCALING` (a :class:`TargetScaling`).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import numpy as np

from pytrain.data.scaling import Standardizer, column_stats
from pytrain.errors import CheckpointError, ModelFormatError
from pytrain.run.properties import P_TARGET_SCALING, json_property

#: the page's form of a run's scaling: {"x_mean", "x_std", "y_mean", "y_std"} (any of the pairs)
PageScaling = Dict[str, List[float]]


def _columns(a: Any) -> np.ndarray:
    """Samples as rows of float32 values (the units every scaler computes in)."""
    return np.asarray(a, dtype=np.float32).reshape(len(a), -1)


def _standardize(a: np.ndarray, mean: Any, std: Any) -> np.ndarray:
    z = Standardizer(np.asarray(mean, np.float32), np.asarray(std, np.float32)).transform(_columns(a))
    return np.ascontiguousarray(z.reshape(np.shape(a)), dtype=np.float32)


def fit(x: Optional[np.ndarray], y: Optional[np.ndarray]) -> PageScaling:
    """The page's form for features ``x`` and/or targets ``y`` (float64 lists, JSON-able)."""
    out: Dict[str, Any] = {}
    for key, a in (("x", x), ("y", y)):
        if a is None:
            continue
        mean, std = column_stats(np.asarray(a, dtype=np.float64).reshape(len(a), -1))
        out[key + "_mean"] = mean.tolist()
        out[key + "_std"] = std.tolist()
    return out


def features(x: np.ndarray, s: Optional[PageScaling]) -> np.ndarray:
    """Features as the model trains on them (unchanged when ``s`` standardises none)."""
    if not s or "x_mean" not in s:
        return x
    return _standardize(x, s["x_mean"], s["x_std"])


def targets(y: np.ndarray, s: Optional[PageScaling]) -> np.ndarray:
    """Regression targets in the units the model learns (unchanged when ``s`` scales none)."""
    if not s or "y_mean" not in s:
        return y
    return _standardize(y, s["y_mean"], s["y_std"])


def standardizer(s: PageScaling, sample_shape: Optional[List[Any]]) -> Standardizer:
    """The page's feature scaling as the checkpoint's Standardizer, shaped like one sample when
    ``sample_shape`` is known and holds as many values, else flat."""
    n = len(s["x_mean"])
    shape = sample_shape
    if not (shape and all(isinstance(d, int) and d > 0 for d in shape) and int(np.prod(shape)) == n):
        shape = [n]
    return Standardizer(np.asarray(s["x_mean"], np.float32).reshape(shape),
                        np.asarray(s["x_std"], np.float32).reshape(shape))


def bake(model_bytes: bytes, s: Optional[PageScaling], output: str) -> bytes:
    """The exported model with the scaling built in: (x - mean) / std on the input, and
    ``output * y_std + y_mean`` on ``output`` (which keeps its name)."""
    from pytrain.generator import models
    from pytrain.engine.graph import NameScope, all_names
    from pytrain.proto import ModelProto, from_array, make_node

    if not s:
        return model_bytes
    model = ModelProto.FromString(bytes(model_bytes))
    if "x_mean" in s:
        g = model.graph
        inits = {t.name for t in g.initializer}
        inp = [v for v in g.input if v.name not in inits][0]
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
        shape = [int(d) for d in dims] if dims and all(d > 0 for d in dims) else [len(s["x_mean"])]
        mean = np.asarray(s["x_mean"], np.float32).reshape(shape)
        std = np.asarray(s["x_std"], np.float32).reshape(shape)
        model, _ = models.with_standardization(model, mean, std)
    if "y_mean" in s:
        g = model.graph
        scope = NameScope(all_names(g))
        raw = scope.fresh(output + ".scaled")
        times = scope.fresh(output + ".times_std")
        mean_name, std_name = scope.fresh(output + ".y_mean"), scope.fresh(output + ".y_std")
        for n in g.node:
            n.output[:] = [raw if o == output else o for o in n.output]
            n.input[:] = [raw if i == output else i for i in n.input]
        g.initializer.extend([from_array(np.asarray(s["y_mean"], np.float32), mean_name),
                              from_array(np.asarray(s["y_std"], np.float32), std_name)])
        g.node.extend([make_node("Mul", [raw, std_name], [times], name="unscale/mul"),
                       make_node("Add", [times, mean_name], [output], name="unscale/add")])
    return model.SerializeToString()


class TargetScaling:
    """Regression targets learnt in standard units: ``(y - mean) / std`` while training, and
    ``output * std + mean`` for metrics and in the exported model (checkpoint property
    :data:`P_TARGET_SCALING`; the same arithmetic as the page's :func:`targets`)."""

    def __init__(self, mean: Any, std: Any, output: Optional[str]) -> None:
        self.mean = np.asarray(mean, dtype=np.float32).reshape(-1)
        self.std = np.asarray(std, dtype=np.float32).reshape(-1)
        self.output = output
        if self.mean.shape != self.std.shape or not len(self.mean) or not np.all(self.std > 0):
            raise CheckpointError("checkpoint property {!r} holds mean {} and std {}: expected one positive std "
                                  "per mean".format(P_TARGET_SCALING, self.mean.tolist(), self.std.tolist()))

    def to_json(self) -> str:
        return json.dumps({"output": self.output, "mean": self.mean.tolist(), "std": self.std.tolist()})

    def _fit(self, a: Any, what: str) -> np.ndarray:
        flat = _columns(a)
        if flat.shape[1] != len(self.mean):
            raise ModelFormatError("{} have {} value(s) per sample, but the run's target scaling ({}) has {}".format(
                what, flat.shape[1], P_TARGET_SCALING, len(self.mean)))
        return flat

    def scale(self, y: Any) -> np.ndarray:
        """Targets in the units the model learns."""
        self._fit(y, "targets")
        return _standardize(y, self.mean, self.std)

    def unscale(self, out: Any) -> np.ndarray:
        """Model outputs in the target's own units."""
        z = Standardizer(self.mean, self.std).inverse_transform(self._fit(out, "model outputs"))
        return np.ascontiguousarray(z.reshape(np.shape(out)), dtype=np.float32)

    def bake(self, model_bytes: bytes) -> bytes:
        """The exported model with ``output * std + mean`` on the scaled output (same name)."""
        return bake(model_bytes, {"y_mean": self.mean.tolist(), "y_std": self.std.tolist()}, str(self.output))


def target_scaling(state: Any) -> Optional[TargetScaling]:
    """The run's target scaling (checkpoint property), or None."""
    d = json_property(state, P_TARGET_SCALING)
    if not d:
        return None
    try:
        return TargetScaling(d["mean"], d["std"], d.get("output"))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError("checkpoint property {!r} is malformed ({})".format(P_TARGET_SCALING, e)) from None


class TargetScaledModule:
    """A Module seen in the target's units: called with raw targets it computes the loss on the
    scaled ones (the loss the run trains) and returns the model output un-scaled (for metrics)."""

    def __init__(self, module: Any, scaling: TargetScaling) -> None:
        self.module = module
        self.scaling = scaling

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def __call__(self, x: Any, y: Any) -> Any:
        res = self.module(x, self.scaling.scale(y))
        if isinstance(res, (list, tuple)) and len(res) > 1:
            return [res[0], self.scaling.unscale(res[1])] + list(res[2:])
        return res
