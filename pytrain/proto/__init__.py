"""ONNX models in pure Python: a protobuf codec for the ONNX messages (no ``onnx`` package needed,
which matters in Pyodide where it does not exist), tensor conversion, and message builders."""
from __future__ import annotations

import os
from typing import Any, Union

from pytrain.errors import ModelFormatError
from pytrain.proto.helper import (attribute_value, make_attribute, make_graph, make_model, make_node,
                                  make_opsetid, make_value_info, model_metadata, node_attributes,
                                  opset_version, value_info_type)
from pytrain.proto.onnx_pb import (AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto,
                                   ValueInfoProto)
from pytrain.proto.tensor import from_array, to_array

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


def load_model(source: ModelSource, what: str = "ONNX model") -> ModelProto:
    """Read a model from a path, bytes, or an ``onnx.ModelProto``/pytrain ModelProto.

    Raises ModelFormatError naming the file when it is malformed, truncated, empty or not a model.
    """
    if isinstance(source, ModelProto):
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
    return model


def model_to_bytes(model: ModelProto) -> bytes:
    return model.SerializeToString()


def write_atomic(path: "str | os.PathLike[str]", data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one, never half."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            try:
                os.fsync(f.fileno())
            except OSError:  # some virtual file systems (Pyodide's MEMFS) cannot fsync
                pass
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_model(model: ModelProto, path: "str | os.PathLike[str]") -> None:
    """Serialize ``model`` to ``path`` atomically."""
    write_atomic(path, model.SerializeToString())
