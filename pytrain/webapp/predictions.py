"""What the page's model answers: validation loss and metric (:func:`evaluate`), and predictions for
samples the page sends (:func:`predict`), through the exported model a :class:`~pytrain.webapp.session.Session` keeps."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import numpy as np

from pytrain.data.tabular import is_missing
from pytrain.run import rows
from pytrain.run.evaluate import evaluate as run_evaluate, perplexity
from pytrain.webapp.common import inference_session


class ExportCache:
    """The exported inference model of one step, kept while the weights stay those of that step."""

    def __init__(self) -> None:
        self._infer: Any = None
        self._step = -1

    def session(self, step: int, export: Callable[[], bytes]) -> Any:
        """The InferenceSession of step ``step``, exported (``export()``: its bytes) when not kept."""
        if self._infer is None or self._step != step:
            self._infer = inference_session(export())
            self._step = step
        return self._infer

    def forget(self) -> None:
        """The weights or the export's recipe changed without a step: export again when next asked."""
        self._infer = None


def evaluate(session: Any, batch: int = 500) -> Dict[str, Any]:
    """Validation loss and accuracy (classification) or RMSE/MAE (regression)."""
    session.need_model()
    d = session.need_data()
    x, y = d["val_x"], d["val_y"]
    if len(x) == 0:
        return {"loss": None, "metric": None, "metric_name": None, "n": 0}
    lm = d["task"] == "lm"   # "Your text"'s causal LM: the loss (and its perplexity) only, no outputs kept
    ev = run_evaluate(session.run.module, x, y, int(batch), keep_outputs=not lm,
                      outputs=d.get("outputs", session.outputs),
                      prepare=d.get("feeds") or (lambda xb, yb: (session.model_x(xb), session.targets(yb))))
    out = ev.outputs
    result: Dict[str, Any] = {"loss": ev.loss, "n": int(len(x)), "epoch": session.run.at.epoch,
                              "step": session.run.at.step}
    if lm:
        result.update({"metric": perplexity(ev.loss), "metric_name": "perplexity"})
    elif d["task"] == "classification":
        pred = predict_classes(out)
        result.update({"metric": float(np.mean(pred == y)), "metric_name": "accuracy"})
    else:
        err = out.reshape(len(out), -1) - y.reshape(len(y), -1).astype(np.float32)
        result.update({"metric": float(np.sqrt(np.mean(err ** 2))), "metric_name": "rmse",
                       "mae": float(np.mean(np.abs(err)))})
    return result


def predict_classes(out: np.ndarray) -> np.ndarray:
    out = out.reshape(len(out), -1)
    if out.shape[1] == 1:  # one logit: binary classification
        return (out[:, 0] > 0).astype(np.int64)
    return np.argmax(out, axis=1)


def row_outputs(session: Any, row: List[str]) -> np.ndarray:
    """The exported model's outputs for one table row as typed (one string per column): what
    onnxruntime answers for the downloaded ``.onnx`` given the same row (:mod:`pytrain.run.rows`)."""
    data = session.source.data
    columns = data.get("columns")
    if not columns:   # a table of numbers only: the features are the row
        names = data.get("feature_names") or []
        columns = [{"name": n, "kind": "number"} for n in names]
        nums, _ = rows.split_cells([row], columns, lambda cell: False)
        return session.outputs(nums)
    nums, words = rows.split_cells([row], columns, is_missing)
    model = inference_session(session.export())
    return np.asarray(model.run(None, rows.feeds(session.model["input"], columns, nums, words))[0])


def predict(session: Any, x: Optional[np.ndarray] = None, row: Optional[List[str]] = None) -> Dict[str, Any]:
    """Model outputs for samples ``x`` (or a table's ``row`` as typed); for classification also
    probabilities and the class."""
    session.need_model()
    d = session.source.data or {"task": "classification", "classes": None}
    if row is not None:
        out = row_outputs(session, [str(c) for c in row]).reshape(1, -1)
    else:
        x = np.asarray(x, dtype=np.float32)
        shape = session.model.get("sample_shape") or []
        if shape and all(isinstance(s, int) for s in shape) and x.size == int(np.prod(shape)):
            x = x.reshape([1] + list(shape))
        elif x.ndim == 1:
            x = x.reshape(1, -1)
        out = session.outputs(x).reshape(len(x), -1)
    res: Dict[str, Any] = {"outputs": out.tolist()}
    if d["task"] == "classification":
        if out.shape[1] == 1:
            p1 = 1.0 / (1.0 + np.exp(-out[:, 0]))
            probs = np.stack([1 - p1, p1], axis=1)
        else:
            z = out - out.max(axis=1, keepdims=True)
            e = np.exp(z)
            probs = e / e.sum(axis=1, keepdims=True)
        cls = np.argmax(probs, axis=1)
        names = d.get("classes")
        res.update({"probabilities": probs.tolist(), "class": cls.tolist(),
                    "label": [names[c] if names and c < len(names) else str(c) for c in cls.tolist()]})
    return res
