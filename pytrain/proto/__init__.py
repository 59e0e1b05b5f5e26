"""Layer 1, the codec: ONNX models in pure Python (no ``onnx`` package, absent in Pyodide): a protobuf codec for
the ONNX messages, tensor conversion and message builders."""
# A pure codec: reading a model with the checks every model gets where it enters is
# pytrain.engine.validate.load_model (one layer up, since the checks ask the op registry).
from __future__ import annotations

import os

from pytrain.base.files import write_atomic
from pytrain.proto.helper import (attribute_value, make_attribute, make_graph, make_model, make_node,
                                  make_opsetid, make_value_info, model_metadata, node_attributes,
                                  opset_version, value_info_type)
from pytrain.proto.onnx_pb import (AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto,
                                   ValueInfoProto)
from pytrain.proto.tensor import from_array, to_array

__all__ = ["AttributeProto", "GraphProto", "ModelProto", "NodeProto", "TensorProto", "ValueInfoProto",
           "attribute_value", "from_array", "make_attribute", "make_graph", "make_model",
           "make_node", "make_opsetid", "make_value_info", "model_metadata", "model_to_bytes",
           "node_attributes", "opset_version", "save_model", "to_array", "value_info_type",
           "write_atomic"]


def model_to_bytes(model: ModelProto) -> bytes:
    return model.SerializeToString()


def save_model(model: ModelProto, path: "str | os.PathLike[str]") -> None:
    """Serialize ``model`` to ``path`` atomically."""
    write_atomic(path, model.SerializeToString())
