"""Graph rewrites the generator runs on a model before it plans what trains: what converters write,
said the way pytrain's gradient rules and exporters mean it. Each pass keeps the model's meaning.

* :mod:`.control`: If with a condition known at generation inlined, Loop/Scan with a known trip count
  unrolled (:mod:`.static` folds conditions and trip counts); what is left may not carry a gradient;
* :mod:`.weights`: float Constant nodes (weights some converters store as nodes) lifted to initializers,
  so they train under the same rule as initializers and export back as initializers;
* :mod:`.legacy`: Dropout's ``ratio`` attribute (before opset 12) as its input;
* :mod:`.softmax`: Softmax/LogSoftmax before opset 13 (coerce to 2-D) as Flatten -> op -> Reshape.
"""
from __future__ import annotations

from typing import Dict

from pytrain.proto import ModelProto, opset_version
from pytrain.generator.normalize.control import flatten_control, refuse_gradient_through
from pytrain.generator.normalize.legacy import dropout_ratio_inputs
from pytrain.generator.normalize.softmax import coerce_softmax
from pytrain.generator.normalize.weights import lift_constant_weights

__all__ = ["normalize_for_training", "refuse_gradient_through"]


def normalize_for_training(model: ModelProto) -> Dict[str, int]:
    """Rewrite ``model`` in place for the generator; returns how many nodes each pass rewrote."""
    opset = opset_version(model)
    return {"control_flow": flatten_control(model.graph, opset),
            "constant_weights": lift_constant_weights(model.graph),
            "softmax": coerce_softmax(model.graph, opset),
            "dropout_ratio": dropout_ratio_inputs(model.graph)}
