"""One evaluation of a model over a dataset in batches: the mean loss, a metric summed per batch,
and the outputs when asked. The CLI's ``eval`` and validation, the page's validation and a Flower
node's local metrics all run it."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from pytrain.errors import DataError

METRICS = ("accuracy", "mae")
#: the sum of a per-sample metric over one batch: f(outputs, targets)
BatchMetric = Callable[[np.ndarray, np.ndarray], float]


class Evaluation(NamedTuple):
    """What :func:`evaluate` measured: mean loss, sample count, the metric's mean (None without a
    metric or model outputs) and the concatenated outputs (when kept)."""
    loss: float
    samples: int
    metric: Optional[float]
    outputs: Optional[np.ndarray]


def default_metric(loss_kind: str) -> str:
    return "accuracy" if loss_kind in ("ce", "bce") else "mae"


def check_metric(metric: str, loss_kind: str) -> str:
    if metric == "accuracy" and loss_kind in ("mse", "l1"):
        raise DataError("metric 'accuracy' needs a classification loss (ce or bce); this model "
                        "trains with {} (use --metric mae)".format(loss_kind))
    return metric


def split_outputs(result: Any) -> Tuple[float, Optional[np.ndarray]]:
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


def batch_metric(metric: Optional[str], loss_kind: str) -> Optional[BatchMetric]:
    """:func:`metric_value` of ``metric`` as a :data:`BatchMetric` (None for no metric)."""
    if metric is None:
        return None
    return lambda out, y: metric_value(metric, loss_kind, out, y)


class EvalOptions(NamedTuple):
    """How :func:`evaluate` judges: the loss's ``reduction``, the ``metric`` of each batch, whether to
    ``keep_outputs``; ``prepare(xb, yb)`` gives what the module takes (default: the batch as it is);
    ``outputs(xb)`` the outputs the metric judges (default: the eval model's first output after the loss)."""
    reduction: str = "mean"
    metric: Optional[BatchMetric] = None
    keep_outputs: bool = False
    prepare: Optional[Callable[[np.ndarray, np.ndarray], Tuple[np.ndarray, ...]]] = None
    outputs: Optional[Callable[[np.ndarray], np.ndarray]] = None


def evaluate(module: Any, x: np.ndarray, y: np.ndarray, batch_size: int, options: Optional[EvalOptions] = None,
             **fields: Any) -> Evaluation:
    """Run the eval model over ``x, y`` in order, ``batch_size`` samples at a time, as ``options`` say
    (an :class:`EvalOptions`, or its ``fields`` by name). The module is left in training mode."""
    opts = options if options is not None else EvalOptions(**fields)
    reduction, metric, keep_outputs, prepare, outputs = opts
    module.eval()
    total_loss, total_metric = 0.0, 0.0
    have_outputs = True
    kept: List[np.ndarray] = []
    for i in range(0, len(x), batch_size):
        xb, yb = x[i:i + batch_size], y[i:i + batch_size]
        loss, out = split_outputs(module(*(prepare(xb, yb) if prepare is not None else (xb, yb))))
        total_loss += loss * batch_loss_weight(reduction, len(yb))
        if outputs is not None:
            out = outputs(xb)
        if out is None:
            have_outputs = False
            continue
        if keep_outputs:
            kept.append(out)
        if metric is not None:
            total_metric += metric(out, yb)
    module.train()
    n = len(x)
    mean = total_metric / n if metric is not None and have_outputs and n else None
    return Evaluation(total_loss / n if n else 0.0, n, mean,
                      np.concatenate(kept) if keep_outputs and have_outputs and kept else None)


def perplexity(loss: float) -> float:
    """exp of a mean next-token loss (capped: a diverged loss reads as a huge number, not inf)."""
    return float(np.exp(min(float(loss), 50.0)))


def evaluate_dataset(module: Any, ds: Any, batch_size: int, loss_kind: str, reduction: str,
                     metric: Optional[str], keep_outputs: bool = False,
                     prepare: Optional[Callable[..., Tuple[np.ndarray, ...]]] = None) -> Dict[str, object]:
    """:func:`evaluate` over a Dataset with a named metric: {"loss", metric name -> value,
    "samples", "outputs"?, "perplexity" for a causal LM} (what the CLI reports and logs)."""
    ev = evaluate(module, ds.x, ds.y, batch_size,
                  EvalOptions(reduction, batch_metric(metric, loss_kind), keep_outputs, prepare))
    result: Dict[str, object] = {"loss": ev.loss, "samples": ev.samples}
    if loss_kind == "clm":
        result["perplexity"] = perplexity(ev.loss)
    if metric is not None and ev.metric is not None:
        result[metric] = ev.metric
    if ev.outputs is not None:
        result["outputs"] = ev.outputs
    return result
