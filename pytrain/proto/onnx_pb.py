"""The ONNX messages (onnx.proto, IR version 10), declared with :mod:`pytrain.proto.message`.

Field numbers and kinds follow onnx/onnx.proto; unknown fields are kept and written back.
"""
from __future__ import annotations

from pytrain.proto.message import (BYTES, DOUBLE, FLOAT, INT32, INT64, MESSAGE, STRING, UINT64,
                                   Field, Message)


class StringStringEntryProto(Message):
    __slots__ = ("key", "value")
    FIELDS = (Field(1, "key", STRING), Field(2, "value", STRING))


class OperatorSetIdProto(Message):
    __slots__ = ("domain", "version")
    FIELDS = (Field(1, "domain", STRING), Field(2, "version", INT64))


class Dimension(Message):
    __slots__ = ("dim_value", "dim_param", "denotation")
    FIELDS = (Field(1, "dim_value", INT64), Field(2, "dim_param", STRING), Field(3, "denotation", STRING))


class TensorShapeProto(Message):
    __slots__ = ("dim",)
    FIELDS = (Field(1, "dim", MESSAGE, repeated=True, msg=lambda: Dimension),)


class TypeProtoTensor(Message):
    __slots__ = ("elem_type", "shape")
    FIELDS = (Field(1, "elem_type", INT32), Field(2, "shape", MESSAGE, msg=lambda: TensorShapeProto))


class TypeProtoSequence(Message):
    __slots__ = ("elem_type",)
    FIELDS = (Field(1, "elem_type", MESSAGE, msg=lambda: TypeProto),)


class TypeProtoMap(Message):
    __slots__ = ("key_type", "value_type")
    FIELDS = (Field(1, "key_type", INT32), Field(2, "value_type", MESSAGE, msg=lambda: TypeProto))


class TypeProtoOptional(Message):
    __slots__ = ("elem_type",)
    FIELDS = (Field(1, "elem_type", MESSAGE, msg=lambda: TypeProto),)


class TypeProto(Message):
    __slots__ = ("tensor_type", "sequence_type", "map_type", "denotation", "sparse_tensor_type",
                 "optional_type")
    FIELDS = (
        Field(1, "tensor_type", MESSAGE, msg=lambda: TypeProtoTensor),
        Field(4, "sequence_type", MESSAGE, msg=lambda: TypeProtoSequence),
        Field(5, "map_type", MESSAGE, msg=lambda: TypeProtoMap),
        Field(6, "denotation", STRING),
        Field(8, "sparse_tensor_type", MESSAGE, msg=lambda: TypeProtoTensor),
        Field(9, "optional_type", MESSAGE, msg=lambda: TypeProtoOptional),
    )


class ValueInfoProto(Message):
    __slots__ = ("name", "type", "doc_string", "metadata_props")
    FIELDS = (
        Field(1, "name", STRING),
        Field(2, "type", MESSAGE, msg=lambda: TypeProto),
        Field(3, "doc_string", STRING),
        Field(4, "metadata_props", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
    )


class TensorSegment(Message):
    __slots__ = ("begin", "end")
    FIELDS = (Field(1, "begin", INT64), Field(2, "end", INT64))


class TensorProto(Message):
    __slots__ = ("dims", "data_type", "segment", "float_data", "int32_data", "string_data",
                 "int64_data", "name", "raw_data", "double_data", "uint64_data", "doc_string",
                 "external_data", "data_location", "metadata_props")
    FIELDS = (
        Field(1, "dims", INT64, repeated=True),
        Field(2, "data_type", INT32),
        Field(3, "segment", MESSAGE, msg=lambda: TensorSegment),
        Field(4, "float_data", FLOAT, repeated=True, packed=True),
        Field(5, "int32_data", INT32, repeated=True, packed=True),
        Field(6, "string_data", BYTES, repeated=True),
        Field(7, "int64_data", INT64, repeated=True, packed=True),
        Field(8, "name", STRING),
        Field(9, "raw_data", BYTES),
        Field(10, "double_data", DOUBLE, repeated=True, packed=True),
        Field(11, "uint64_data", UINT64, repeated=True, packed=True),
        Field(12, "doc_string", STRING),
        Field(13, "external_data", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
        Field(14, "data_location", INT32),
        Field(16, "metadata_props", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
    )


class SparseTensorProto(Message):
    __slots__ = ("values", "indices", "dims")
    FIELDS = (
        Field(1, "values", MESSAGE, msg=lambda: TensorProto),
        Field(2, "indices", MESSAGE, msg=lambda: TensorProto),
        Field(3, "dims", INT64, repeated=True),
    )


class AttributeType:
    """AttributeProto.AttributeType values."""

    UNDEFINED, FLOAT, INT, STRING, TENSOR, GRAPH, FLOATS, INTS, STRINGS, TENSORS, GRAPHS = range(11)
    SPARSE_TENSOR, SPARSE_TENSORS, TYPE_PROTO, TYPE_PROTOS = 11, 12, 13, 14
    NAMES = ("UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS", "STRINGS", "TENSORS",
             "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS")

    @classmethod
    def name_of(cls, value: int) -> str:
        return cls.NAMES[value] if 0 <= value < len(cls.NAMES) else "unknown type %d" % value


class AttributeProto(Message):
    __slots__ = ("name", "f", "i", "s", "t", "g", "floats", "ints", "strings", "tensors", "graphs",
                 "doc_string", "tp", "type_protos", "type", "ref_attr_name", "sparse_tensor",
                 "sparse_tensors")
    FIELDS = (
        Field(1, "name", STRING),
        Field(2, "f", FLOAT),
        Field(3, "i", INT64),
        Field(4, "s", BYTES),
        Field(5, "t", MESSAGE, msg=lambda: TensorProto),
        Field(6, "g", MESSAGE, msg=lambda: GraphProto),
        Field(7, "floats", FLOAT, repeated=True),
        Field(8, "ints", INT64, repeated=True),
        Field(9, "strings", BYTES, repeated=True),
        Field(10, "tensors", MESSAGE, repeated=True, msg=lambda: TensorProto),
        Field(11, "graphs", MESSAGE, repeated=True, msg=lambda: GraphProto),
        Field(13, "doc_string", STRING),
        Field(14, "tp", MESSAGE, msg=lambda: TypeProto),
        Field(15, "type_protos", MESSAGE, repeated=True, msg=lambda: TypeProto),
        Field(20, "type", INT32),
        Field(21, "ref_attr_name", STRING),
        Field(22, "sparse_tensor", MESSAGE, msg=lambda: SparseTensorProto),
        Field(23, "sparse_tensors", MESSAGE, repeated=True, msg=lambda: SparseTensorProto),
    )


class NodeProto(Message):
    __slots__ = ("input", "output", "name", "op_type", "attribute", "doc_string", "domain",
                 "overload", "metadata_props")
    FIELDS = (
        Field(1, "input", STRING, repeated=True),
        Field(2, "output", STRING, repeated=True),
        Field(3, "name", STRING),
        Field(4, "op_type", STRING),
        Field(5, "attribute", MESSAGE, repeated=True, msg=lambda: AttributeProto),
        Field(6, "doc_string", STRING),
        Field(7, "domain", STRING),
        Field(8, "overload", STRING),
        Field(9, "metadata_props", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
    )


class TensorAnnotation(Message):
    __slots__ = ("tensor_name", "quant_parameter_tensor_names")
    FIELDS = (
        Field(1, "tensor_name", STRING),
        Field(2, "quant_parameter_tensor_names", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
    )


class GraphProto(Message):
    __slots__ = ("node", "name", "initializer", "doc_string", "input", "output", "value_info",
                 "quantization_annotation", "sparse_initializer", "metadata_props")
    FIELDS = (
        Field(1, "node", MESSAGE, repeated=True, msg=lambda: NodeProto),
        Field(2, "name", STRING),
        Field(5, "initializer", MESSAGE, repeated=True, msg=lambda: TensorProto),
        Field(10, "doc_string", STRING),
        Field(11, "input", MESSAGE, repeated=True, msg=lambda: ValueInfoProto),
        Field(12, "output", MESSAGE, repeated=True, msg=lambda: ValueInfoProto),
        Field(13, "value_info", MESSAGE, repeated=True, msg=lambda: ValueInfoProto),
        Field(14, "quantization_annotation", MESSAGE, repeated=True, msg=lambda: TensorAnnotation),
        Field(15, "sparse_initializer", MESSAGE, repeated=True, msg=lambda: SparseTensorProto),
        Field(16, "metadata_props", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
    )


class FunctionProto(Message):
    __slots__ = ("name", "input", "output", "attribute", "node", "doc_string", "opset_import",
                 "domain", "attribute_proto", "value_info", "overload", "metadata_props")
    FIELDS = (
        Field(1, "name", STRING),
        Field(4, "input", STRING, repeated=True),
        Field(5, "output", STRING, repeated=True),
        Field(6, "attribute", STRING, repeated=True),
        Field(7, "node", MESSAGE, repeated=True, msg=lambda: NodeProto),
        Field(8, "doc_string", STRING),
        Field(9, "opset_import", MESSAGE, repeated=True, msg=lambda: OperatorSetIdProto),
        Field(10, "domain", STRING),
        Field(11, "attribute_proto", MESSAGE, repeated=True, msg=lambda: AttributeProto),
        Field(12, "value_info", MESSAGE, repeated=True, msg=lambda: ValueInfoProto),
        Field(13, "overload", STRING),
        Field(14, "metadata_props", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
    )


class ModelProto(Message):
    __slots__ = ("ir_version", "producer_name", "producer_version", "domain", "model_version",
                 "doc_string", "graph", "opset_import", "metadata_props", "functions")
    FIELDS = (
        Field(1, "ir_version", INT64),
        Field(2, "producer_name", STRING),
        Field(3, "producer_version", STRING),
        Field(4, "domain", STRING),
        Field(5, "model_version", INT64),
        Field(6, "doc_string", STRING),
        Field(7, "graph", MESSAGE, msg=lambda: GraphProto),
        Field(8, "opset_import", MESSAGE, repeated=True, msg=lambda: OperatorSetIdProto),
        Field(14, "metadata_props", MESSAGE, repeated=True, msg=lambda: StringStringEntryProto),
        Field(25, "functions", MESSAGE, repeated=True, msg=lambda: FunctionProto),
    )
