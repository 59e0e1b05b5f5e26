"""Evaluation over a dataset in batches: mean loss plus accuracy (classification, BCE) or MAE."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from pytrain import data
from pytrain.errors import DataError

METRICS = ("accuracy", "mae")


def default_metric(loss_kind: str) -> str:
    return "accuracy" if loss_kind in ("ce", "bce") else "mae"


def check_metric(metric: str, loss_kind: str) -> str:
    if metric == "accuracy" and loss_kind in ("mse", "l1"):
        raise DataError("metric 'accuracy' needs a classification loss (ce or bce); this model "
                        "trains with {} (use --metric mae)".format(loss_kind))
    return metric


def split_outputs(result) -> Tuple[float, Optional[np.ndarray]]:
    """(loss, first model output or None) from what Module.__call__ returned."""
    if isinstance(result, (tuple, list)):
        loss = result[0]
        out = np.asarray(result[1]) if len(result) > 1 else None
    else:
        loss, out = result, None
    return float(np.asarray(loss).reshape(-1)[0]), out


def batch_loss_weight(reduction: str, n: int) -> float:
    """Factor turning a batch loss into a sum over samples (mean -> n, sum -> 1)."""
    return float(n) if reduction == "mean" else 1.0


def metric_value(metric: str, loss_kind: str, out: np.ndarray, y: np.ndarray) -> float:
    """Sum of the per-sample metric over the batch (divide by N for the mean)."""
    if metric == "accuracy":
        if loss_kind == "bce":
            hits = ((out > 0) == (y > 0.5)).reshape(len(y), -1).mean(axis=1)
            return float(hits.sum())
        return float(np.sum(out.reshape(len(y), -1).argmax(axis=1) == y))
    diff = np.abs(out.astype(np.float64) - y.reshape(out.shape).astype(np.float64))
    return float(diff.reshape(len(y), -1).mean(axis=1).sum())


def evaluate(module, ds: data.Dataset, batch_size: int, loss_kind: str, reduction: str,
             metric: Optional[str], keep_outputs: bool = False) -> Dict[str, object]:
    """Run the eval model over ``ds``: {"loss", metric name -> value, "samples", "outputs"?}."""
    module.eval()
    total_loss = 0.0
    total_metric = 0.0
    have_outputs = True
    kept: List[np.ndarray] = []
    for xb, yb in data.iter_batches(ds.x, ds.y, batch_size):
        loss, out = split_outputs(module(xb, yb))
        total_loss += loss * batch_loss_weight(reduction, len(yb))
        if out is None:
            have_outputs = False
            continue
        if keep_outputs:
            kept.append(out)
        if metric is not None:
            total_metric += metric_value(metric, loss_kind, out, yb)
    n = len(ds)
    result: Dict[str, object] = {"loss": total_loss / n, "samples": n}
    if metric is not None and have_outputs:
        result[metric] = total_metric / n
    if keep_outputs and have_outputs and kept:
        result["outputs"] = np.concatenate(kept)
    return result


def describe(result: Dict[str, object], prefix: str = "") -> str:
    """'loss 0.1234  accuracy 97.50%' style text."""
    parts = ["{}loss {:.4f}".format(prefix, result["loss"])]
    if "accuracy" in result:
        parts.append("{}accuracy {:.2f}%".format(prefix, 100.0 * float(result["accuracy"])))  # type: ignore[arg-type]
    if "mae" in result:
        parts.append("{}mae {:.4f}".format(prefix, result["mae"]))
    return "  ".join(parts)
