"""Feature standardisation and target scaling the page applies while training, built into the
exported model so it takes raw rows and answers in the target's own units."""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from pytrain import models
from pytrain.graph import NameScope, all_names
from pytrain.proto import ModelProto, from_array, make_node


def fit(x: Optional[np.ndarray], y: Optional[np.ndarray]) -> Dict[str, Any]:
    """{"x_mean", "x_std"} for features and/or {"y_mean", "y_std"} for targets (lists, JSON-able);
    a constant column gets std 1 so it stays finite."""
    out: Dict[str, Any] = {}
    for key, a in (("x", x), ("y", y)):
        if a is None:
            continue
        flat = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
        std = flat.std(axis=0)
        out[key + "_mean"] = flat.mean(axis=0).tolist()
        out[key + "_std"] = np.where(std > 1e-12, std, 1.0).tolist()
    return out


def features(x: np.ndarray, s: Optional[Dict[str, Any]]) -> np.ndarray:
    if not s or "x_mean" not in s:
        return x
    flat = x.reshape(len(x), -1)
    z = (flat - np.asarray(s["x_mean"], np.float32)) / np.asarray(s["x_std"], np.float32)
    return np.ascontiguousarray(z.reshape(x.shape), dtype=np.float32)


def targets(y: np.ndarray, s: Optional[Dict[str, Any]]) -> np.ndarray:
    if not s or "y_mean" not in s:
        return y
    flat = y.reshape(len(y), -1)
    z = (flat - np.asarray(s["y_mean"], np.float32)) / np.asarray(s["y_std"], np.float32)
    return np.ascontiguousarray(z.reshape(y.shape), dtype=np.float32)


def bake(model_bytes: bytes, s: Optional[Dict[str, Any]], output: str) -> bytes:
    """The exported model with the scaling built in: (x - mean) / std on the input, and
    ``output * y_std + y_mean`` on ``output`` (which keeps its name)."""
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
