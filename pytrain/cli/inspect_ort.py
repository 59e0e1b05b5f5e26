"""``pytrain inspect`` of the models ONNX Runtime's ``generate_artifacts`` wrote: its training model
(user inputs, parameters and which train, ORT's ops and whether pytrain runs them), its eval model and
its optimizer model (the node's update, as pytrain runs it), read by the reader ``pytrain.api`` uses
(:mod:`pytrain.ort_made`). The parameter names come from the checkpoint beside the file (ORT writes the
four artifacts into one folder)."""
from __future__ import annotations

import os
from collections import Counter
from typing import List, Optional

from pytrain.device import ort_made
from pytrain.cli._common import shape_str, table
from pytrain.errors import PytrainError
from pytrain.base.layout import LAYOUT_KEY
from pytrain.proto import ModelProto, model_metadata, opset_version, value_info_type

#: what ORT's generate_artifacts writes beside its models
ORT_CHECKPOINT = "checkpoint"


def ort_made_kind(model: ModelProto) -> Optional[str]:
    """"training" or "optimizer" for a model ORT's generate_artifacts made, else None (an eval model is
    an ordinary inference model plus a loss: recognised beside its training model only)."""
    if ort_made.is_ort_training_model(model):
        return "training"
    try:
        return "optimizer" if ort_made.ort_optimizer_spec(model) is not None else None
    except PytrainError:  # ORT's optimizer node, with something pytrain refuses: shown as ORT's
        return "optimizer"


def _checkpoint_names(path: str) -> Optional[List[str]]:
    beside = os.path.join(os.path.dirname(os.path.abspath(path)), ORT_CHECKPOINT)
    if not os.path.isfile(beside):
        return None
    from pytrain.run.artifact_dir import load_state

    return list(load_state(beside).parameters)


#: ORT's ops pytrain reads as the model's structure rather than runs as they are
READ_AS = {"InPlaceAccumulatorV2": "read as the gradient accumulation",
           "MaxPoolGrad": "read as pytrain's MaxPoolGrad", "GRUTraining": "read as ONNX GRU",
           "LSTMTraining": "read as ONNX LSTM", "GRUGrad": "read as pytrain's GRUGrad",
           "LSTMGrad": "read as pytrain's LSTMGrad"}


def _ops_lines(model: ModelProto, names: Optional[List[str]], only_ort: bool = True) -> List[str]:
    """Each ORT op of ``model`` (every op unless ``only_ort``) and whether pytrain runs it."""
    converted = ModelProto.FromString(model.SerializeToString())
    if ort_made.is_ort_training_model(converted):
        try:
            converted = ort_made.from_ort_training(converted, names if names is not None else
                                                   [v.name for v in model.graph.input], "training model")
        except PytrainError as e:
            return ["pytrain refuses it: {}".format(e)]
    missing = {(d, op) for d, op, _ in ort_made.ops_without_kernel(converted)}
    hist = Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node
                   if not only_ort or n.domain in ort_made.ORT_DOMAINS or n.op_type.endswith("Grad"))
    rows = [("op", "count", "pytrain")]
    rows += [("%s:%s" % key, c, "NO: refused when loaded" if key in missing else READ_AS.get(key[1], "runs"))
             for key, c in sorted(hist.items())]
    return ["ONNX Runtime's training ops:" if only_ort else "ops:"] + table(rows, "  ")


def ort_model_lines(path: str, model: ModelProto, kind: str) -> List[str]:
    """What an ORT-made ``kind`` model holds, as pytrain reads it."""
    lines = ["ONNX Runtime {} model {} (made by its generate_artifacts; opset {}, {} nodes)".format(
        kind, path, opset_version(model), len(model.graph.node))]
    if kind == "optimizer":
        (node,) = model.graph.node
        try:
            spec = ort_made.ort_optimizer_spec(model)
            lines.append("update: com.microsoft:{} over every trainable parameter; pytrain runs it as {}".format(
                node.op_type, spec.describe() if spec is not None else "?"))
        except PytrainError as e:
            lines.append("pytrain refuses it: {}".format(e))
        return lines
    names = _checkpoint_names(path)
    if names is None:
        lines.append("no ONNX Runtime checkpoint beside it: the parameters are the inputs the checkpoint names")
        lines += table([(v.name,) + _type(v) for v in model.graph.input], "  ")
        return lines + _ops_lines(model, None)
    converted = ort_made.from_ort_training(ModelProto.FromString(model.SerializeToString()), names, path)
    import json

    layout = json.loads(model_metadata(converted)[LAYOUT_KEY])
    types = {v.name: _type(v) for v in model.graph.input}
    lines.append("inputs:")
    lines += table([(n,) + types[n] for n in layout["user_inputs"]], "  ")
    lines.append("parameters: {} ({} train: ORT accumulates their gradients)".format(
        len(layout["trainable"]) + len(layout["frozen"]), len(layout["trainable"])))
    lines += table([(n,) + types[n] + ("trains",) for n in layout["trainable"]] +
                   [(n,) + types[n] + ("frozen",) for n in layout["frozen"]], "  ")
    return lines + _ops_lines(model, names)


def ort_eval_lines(path: str, model: ModelProto) -> Optional[List[str]]:
    """An ORT eval model (beside ORT's checkpoint, with inputs the checkpoint names), else None."""
    names = _checkpoint_names(path)
    if names is None or LAYOUT_KEY in model_metadata(model):
        return None
    known = set(names)
    params = [v for v in model.graph.input if v.name in known]
    if not params:
        return None
    lines = ["ONNX Runtime eval model {} (made by its generate_artifacts; opset {}, {} nodes)".format(
        path, opset_version(model), len(model.graph.node)), "inputs:"]
    lines += table([(v.name,) + _type(v) for v in model.graph.input if v.name not in known], "  ")
    lines.append("parameters: {} (from the checkpoint beside it)".format(len(params)))
    lines += table([(v.name,) + _type(v) for v in params], "  ")
    lines.append("outputs:")
    lines += table([(v.name,) + _type(v) for v in model.graph.output], "  ")
    return lines + _ops_lines(model, names, only_ort=False)


def _type(v) -> tuple:
    from pytrain.base import dtypes

    elem, shape = value_info_type(v)
    return dtypes.NAMES.get(elem, "?"), shape_str(shape)
