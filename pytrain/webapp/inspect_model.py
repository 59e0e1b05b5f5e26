"""What the page shows about an uploaded model: inputs, outputs, parameters, ops."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pytrain import proto as _proto
from pytrain.errors import ModelFormatError, UnsupportedOpError
from pytrain.ops import get_kernel
from pytrain.ops.control.subgraph import all_nodes
from pytrain.generator.trainable import classify_initializers
from pytrain.webapp.common import FLOAT_TYPES, load_upload


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
    # "the last N layers" as generate_artifacts' trainable_ops counts them: the nodes reading weights,
    # in graph order; a weight's layer is its last reader's place from the end (1: the last layer)
    layers = [[i for i in n.input if i in verdict and verdict[i]["trains"]] for n in graph.node]
    layers = [layer for layer in layers if layer]
    from_end: Dict[str, int] = {}
    for k, layer in enumerate(reversed(layers), 1):
        for p in layer:
            from_end.setdefault(p, k)
    for t in graph.initializer:
        size = int(np.prod(list(t.dims))) if len(t.dims) else 1
        params.append({"name": t.name, "shape": [int(d) for d in t.dims], "size": size,
                       "float": int(t.data_type) in FLOAT_TYPES, "trains": verdict[t.name]["trains"],
                       "why": verdict[t.name]["why"], "layer": from_end.get(t.name)})
    ops = sorted({n.op_type for n in all_nodes(graph)})  # the bodies of If/Loop/Scan too
    if not inputs:
        raise ModelFormatError("the model has no graph input besides its initializers")
    if not outputs:
        raise ModelFormatError("the model declares no graph output")
    return {"inputs": inputs, "outputs": outputs, "params": params, "ops": ops,
            "nodes": len(graph.node), "layers": len(layers), "opset": _proto.opset_version(model)}


def refuse_unsupported(model: Any, name: str) -> None:
    """Refuse a model with ops pytrain has no kernel for, naming only those ops (the page says so
    when the model is chosen, before anything is offered for it)."""
    missing = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in all_nodes(model.graph)
                      if get_kernel(n.op_type, n.domain or "") is None})
    if missing:
        raise UnsupportedOpError("%s uses %s %s, which pytrain cannot run, so it cannot be trained here. "
                                 "Choose a model without %s." % (name, "ops" if len(missing) > 1 else "the op",
                                                                 ", ".join(missing), "them" if len(missing) > 1 else "it"))


def inspect_upload(blob: bytes, name: str, extra_files: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
    """An uploaded inference model described for the page, refused when it uses ops pytrain lacks."""
    model = load_upload(blob, name, extra_files)
    refuse_unsupported(model, name)
    return describe_model(model)


def label_consumer_output(training: Any, label_name: str) -> Optional[str]:
    """Guess the forward output of ready-made artifacts: the other input of the node reading the labels."""
    for node in training.graph.node:
        if label_name in node.input:
            for i in node.input:
                if i and i != label_name:
                    return i
    return None


