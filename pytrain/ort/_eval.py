"""ORT's eval model conventions on a pytrain eval model."""
from __future__ import annotations

from typing import Any

from pytrain.proto import ModelProto, make_attribute


def ort_eval_model(model: ModelProto, source: Any = None) -> ModelProto:
    """As ORT writes the eval model: BatchNormalization carries ``training_mode=0`` and Dropout keeps
    its third input slot, empty (inference). ``model`` is changed in place and returned."""
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type == "BatchNormalization":
            n.attribute[:] = [a for a in n.attribute if a.name != "training_mode"] + \
                [make_attribute("training_mode", 0)]
        elif n.op_type == "Dropout" and len(n.input) == 2:
            n.input.append("")
    return model
