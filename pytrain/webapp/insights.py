"""What the model learned, for the page's fourth panel: a confusion matrix and per-class accuracy
(classification) or predicted against true values (regression) on the validation set, and the
model's parameters with their sizes and whether they train."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from pytrain.webapp.predictions import predict_classes

MAX_POINTS = 500   # predicted-vs-true pairs sent to the page (a scatter needs no more)


def describe(session: Any) -> Dict[str, Any]:
    """Validation results and the parameter table of ``session``'s current model."""
    session.need_model()
    d = session.need_data()
    x, y = d["val_x"], d["val_y"]
    run = session.run
    out: Dict[str, Any] = {"task": d["task"], "n": int(len(x)), "epoch": run.at.epoch, "step": run.at.step,
                           "layers": layers(session), "lr": run.lr,
                           "schedule": "constant learning rate %g (no schedule)" % run.lr}
    if len(x) == 0 or d["task"] == "lm":   # a causal LM's validation is its loss (the training panel's)
        return out
    outputs = d.get("outputs") or session.outputs   # "Your text" classifiers: ids and mask, see text_source
    pred = np.concatenate([outputs(x[i:i + 500]) for i in range(0, len(x), 500)])
    if d["task"] == "classification":
        k = max(int(d["num_classes"]), 2)
        guess = predict_classes(pred)
        matrix = np.zeros((k, k), dtype=np.int64)
        np.add.at(matrix, (y.astype(np.int64), guess.astype(np.int64)), 1)
        support = matrix.sum(axis=1)
        names = d.get("classes") or [str(i) for i in range(k)]
        out.update({"classes": [str(c) for c in names[:k]] + [str(i) for i in range(len(names), k)],
                    "confusion": matrix.tolist(), "support": support.tolist(),
                    "per_class": [float(matrix[i, i] / support[i]) if support[i] else None for i in range(k)],
                    "accuracy": float(np.trace(matrix) / max(1, matrix.sum()))})
    else:
        p = pred.reshape(len(pred), -1)[:, 0].astype(np.float64)
        t = y.reshape(len(y), -1)[:, 0].astype(np.float64)
        pick = np.linspace(0, len(p) - 1, min(len(p), MAX_POINTS)).astype(np.int64)
        out.update({"pairs": [[float(t[i]), float(p[i])] for i in pick],
                    "rmse": float(np.sqrt(np.mean((p - t) ** 2))), "mae": float(np.mean(np.abs(p - t))),
                    "baseline_rmse": float(np.std(t))})
    return out


def layers(session: Any) -> List[Dict[str, Any]]:
    """The model's parameters in graph order: name, shape, size, and whether the optimizer trains it."""
    rows = []
    for name, p in session.run.state.parameters.items():
        size = int(np.prod(p.shape)) if len(p.shape) else 1
        rows.append({"name": name, "shape": [int(s) for s in p.shape], "size": size, "trains": bool(p.requires_grad)})
    bb = session.backbone
    if bb is not None:   # a pretrained feature extractor in front of the head: frozen, all its weights in one row
        rows.insert(0, {"name": "backbone %s (frozen)" % bb.info.get("name", ""), "shape": [],
                        "note": "the whole extractor", "size": int(bb.info.get("params", 0)), "trains": False})
    return rows
