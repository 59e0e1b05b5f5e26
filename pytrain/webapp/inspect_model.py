"""What the page shows about an uploaded model: inputs, outputs, parameters, ops."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain import proto as _proto
from pytrain.errors import ModelFormatError
from pytrain.trainable import classify_initializers
from pytrain.webapp.common import _FLOAT_TYPES


def _dims(vi: Any) -> Tuple[int, List[Any]]:
    elem, shape = _proto.value_info_type(vi)
    return int(elem or 0), list(shape) if shape is not None else []


def describe_model(model: Any) -> Dict[str, Any]:
    """Inputs, outputs and float initializers (trainable candidates) of an inference model."""
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    inputs = []
    for vi in graph.input:
        if vi.name in init_names:
            continue
        elem, shape = _dims(vi)
        inputs.append({"name": vi.name, "elem_type": elem, "shape": shape})
    outputs = []
    for vi in graph.output:
        elem, shape = _dims(vi)
        outputs.append({"name": vi.name, "elem_type": elem, "shape": shape})
    params = []
    # whether each initializer trains by default, and why (pytrain.trainable's rule)
    verdict = {r["name"]: r for r in classify_initializers(graph.node, graph.initializer,
                                                           list(graph.value_info) + list(graph.input))}
    for t in graph.initializer:
        size = int(np.prod(list(t.dims))) if len(t.dims) else 1
        params.append({"name": t.name, "shape": [int(d) for d in t.dims], "size": size,
                       "float": int(t.data_type) in _FLOAT_TYPES, "trains": verdict[t.name]["trains"],
                       "why": verdict[t.name]["why"]})
    ops = sorted({n.op_type for n in graph.node})
    if not inputs:
        raise ModelFormatError("the model has no graph input besides its initializers")
    if not outputs:
        raise ModelFormatError("the model declares no graph output")
    return {"inputs": inputs, "outputs": outputs, "params": params, "ops": ops,
            "nodes": len(graph.node), "opset": _proto.opset_version(model)}


def _label_consumer_output(training: Any, label_name: str) -> Optional[str]:
    """Guess the forward output of ready-made artifacts: the other input of the node reading the labels."""
    for node in training.graph.node:
        if label_name in node.input:
            for i in node.input:
                if i and i != label_name:
                    return i
    return None


