"""Older versions' attributes that the training graph needs as inputs.

Dropout before opset 12 holds ``ratio`` in an attribute; the training model gives every Dropout a
``training_mode`` input (pytrain/autodiff/training_forms.py), after which the ratio must be an input
too. Rewritten here as Dropout(data, ratio) with the same meaning; the exported inference model drops
Dropout whatever its form."""
from __future__ import annotations

import numpy as np

from pytrain.engine.graph import NameScope, all_names
from pytrain.proto import GraphProto, from_array, node_attributes


def dropout_ratio_inputs(graph: GraphProto) -> int:
    """Move each Dropout's ``ratio`` attribute into its ratio input (in place); returns how many."""
    scope = NameScope(all_names(graph))
    moved = 0
    for n in graph.node:
        if n.op_type != "Dropout" or n.domain not in ("", "ai.onnx"):
            continue
        attrs = node_attributes(n)
        if "ratio" not in attrs or len([i for i in n.input if i]) > 1:
            continue
        name = scope.fresh((n.name or n.output[0]) + "/ratio")
        graph.initializer.append(from_array(np.array(float(attrs["ratio"]), np.float32), name))
        n.input = [n.input[0], name]
        n.attribute = [a for a in n.attribute if a.name not in ("ratio", "is_test", "consumed_inputs")]
        moved += 1
    return moved
