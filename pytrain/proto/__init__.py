"""ONNX models in pure Python: a protobuf codec for the ONNX messages (no ``onnx`` package needed,
which matters in Pyodide where it does not exist), tensor conversion, and message builders."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

from pytrain.errors import ModelFormatError
from pytrain.files import write_atomic
from pytrain.proto.helper import (attribute_value, make_attribute, make_graph, make_model, make_node,
                                  make_opsetid, make_value_info, model_metadata, node_attributes,
                                  opset_version, value_info_type)
from pytrain.proto.onnx_pb import (AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto,
                                   ValueInfoProto)
from pytrain.proto.tensor import from_array, to_array
from pytrain.proto.external_data import external_tensors, load_external_data
from pytrain.proto.value_types import refuse_non_tensor_values

ModelSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, ModelProto, Any]

__all__ = ["AttributeProto", "GraphProto", "ModelProto", "NodeProto", "TensorProto", "ValueInfoProto",
           "attribute_value", "from_array", "load_model", "make_attribute", "make_graph", "make_model",
           "make_node", "make_opsetid", "make_value_info", "model_metadata", "model_to_bytes",
           "node_attributes", "opset_version", "save_model", "to_array", "value_info_type",
           "write_atomic"]


def _read_source(source: ModelSource, what: str) -> "tuple[bytes, str]":
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "(%d bytes)" % len(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                return f.read(), path
        except FileNotFoundError:
            raise ModelFormatError("%s file %s does not exist" % (what, path)) from None
        except IsADirectoryError:
            raise ModelFormatError("%s path %s is a directory, expected an .onnx file" % (what, path)) from None
    if hasattr(source, "SerializeToString"):  # onnx.ModelProto, or ours
        return source.SerializeToString(), "(a %s object)" % type(source).__name__
    raise ModelFormatError("cannot read a %s from a %s: pass a path, bytes or a ModelProto"
                           % (what, type(source).__name__))


def load_model(source: ModelSource, what: str = "ONNX model",
               external_data: "Optional[Mapping[str, bytes]]" = None) -> ModelProto:
    """Read a model from a path, bytes, or an ``onnx.ModelProto``/pytrain ModelProto.

    Tensors kept in ONNX external data (``m.onnx.data``) are read in: from the model's folder when
    ``source`` is a path, from ``external_data`` ({location: bytes}) otherwise
    (:mod:`pytrain.proto.external_data`; a location leaving the model's folder is refused).
    Raises ModelFormatError naming the file when it is malformed, truncated, empty or not a model.
    """
    if isinstance(source, ModelProto):
        refuse_non_tensor_values(source, what)
        if any(True for _ in external_tensors(source)):
            source = load_external_data(ModelProto.FromString(source.SerializeToString()), None, external_data)
        return source
    data, label = _read_source(source, what)
    if not data:
        raise ModelFormatError("%s %s is empty" % (what, label))
    try:
        model = ModelProto.FromString(data)
    except ModelFormatError as e:
        raise ModelFormatError("%s %s is not a valid ONNX file: %s" % (what, label, e)) from None
    if model.graph is None:
        raise ModelFormatError("%s %s is not a valid ONNX model: it has no graph" % (what, label))
    if not model.opset_import:
        raise ModelFormatError("%s %s is not a valid ONNX model: it imports no opset" % (what, label))
    from pytrain.validate import validate_model  # (imports the op registry: not at pytrain.proto's import)

    validate_model(model, "%s %s" % (what, label))
    refuse_non_tensor_values(model, "%s %s" % (what, label))
    if any(True for _ in external_tensors(model)):
        folder = os.path.dirname(os.path.abspath(os.fspath(source))) if isinstance(source, (str, os.PathLike)) else None
        load_external_data(model, folder, external_data)
    return model


def model_to_bytes(model: ModelProto) -> bytes:
    return model.SerializeToString()


def save_model(model: ModelProto, path: "str | os.PathLike[str]") -> None:
    """Serialize ``model`` to ``path`` atomically."""
    write_atomic(path, model.SerializeToString())
