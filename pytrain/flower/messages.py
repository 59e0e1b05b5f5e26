"""The Flower Fleet API messages a node exchanges with a SuperLink, declared for pytrain's codec.

Field numbers and kinds follow flwr 1.42's ``fleet.proto``, ``message.proto``, ``node.proto``,
``heartbeat.proto``, ``recorddict.proto`` and ``error.proto``. pytrain's codec has no ``bool`` or
``sint64`` kinds: a bool travels as a 0/1 varint (declared UINT64) and a ``sint64`` as its zigzag
varint (declared UINT64; ``zigzag``/``unzigzag`` convert).

Messages are serialized with scalars only when set and in field-number order, which is what
protobuf's deterministic serialization writes for proto3: the bytes of a Message object must equal
flwr's for the content-addressed ids to agree.
"""
from __future__ import annotations

from pytrain.proto.message import BYTES, DOUBLE, MESSAGE, STRING, UINT64, Field, Message

_BOOL = UINT64
_SINT64 = UINT64


def zigzag(value: int) -> int:
    """A signed int as protobuf's sint64 varint value."""
    return (value << 1) ^ (value >> 63) if value < 0 else value << 1


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


# -- node.proto, error.proto -------------------------------------------------------------------------
class Node(Message):
    FIELDS = (Field(1, "node_id", UINT64),)


class Error(Message):
    FIELDS = (Field(1, "code", _SINT64), Field(2, "reason", STRING))


# -- recorddict.proto --------------------------------------------------------------------------------
class DoubleList(Message):
    FIELDS = (Field(1, "vals", DOUBLE, repeated=True, packed=True),)


class SintList(Message):
    FIELDS = (Field(1, "vals", _SINT64, repeated=True, packed=True),)


class UintList(Message):
    FIELDS = (Field(1, "vals", UINT64, repeated=True, packed=True),)


class BoolList(Message):
    FIELDS = (Field(1, "vals", _BOOL, repeated=True, packed=True),)


class StringList(Message):
    FIELDS = (Field(1, "vals", STRING, repeated=True),)


class BytesList(Message):
    FIELDS = (Field(1, "vals", BYTES, repeated=True),)


class MetricRecordValue(Message):
    """oneof value: double, sint64, uint64 or a list of one of them."""
    FIELDS = (Field(1, "double", DOUBLE), Field(2, "sint64", _SINT64), Field(3, "uint64", UINT64),
              Field(21, "double_list", MESSAGE, msg=lambda: DoubleList),
              Field(22, "sint_list", MESSAGE, msg=lambda: SintList),
              Field(23, "uint_list", MESSAGE, msg=lambda: UintList))


class ConfigRecordValue(Message):
    """oneof value: the metric kinds plus bool, string, bytes and their lists."""
    FIELDS = (Field(1, "double", DOUBLE), Field(2, "sint64", _SINT64), Field(3, "uint64", UINT64),
              Field(4, "bool", _BOOL), Field(5, "string", STRING), Field(6, "bytes", BYTES),
              Field(21, "double_list", MESSAGE, msg=lambda: DoubleList),
              Field(22, "sint_list", MESSAGE, msg=lambda: SintList),
              Field(23, "uint_list", MESSAGE, msg=lambda: UintList),
              Field(24, "bool_list", MESSAGE, msg=lambda: BoolList),
              Field(25, "string_list", MESSAGE, msg=lambda: StringList),
              Field(26, "bytes_list", MESSAGE, msg=lambda: BytesList))


class MetricRecordItem(Message):
    FIELDS = (Field(1, "key", STRING), Field(2, "value", MESSAGE, msg=lambda: MetricRecordValue))


class MetricRecord(Message):
    FIELDS = (Field(1, "items", MESSAGE, repeated=True, msg=lambda: MetricRecordItem),)


class ConfigRecordItem(Message):
    FIELDS = (Field(1, "key", STRING), Field(2, "value", MESSAGE, msg=lambda: ConfigRecordValue))


class ConfigRecord(Message):
    FIELDS = (Field(1, "items", MESSAGE, repeated=True, msg=lambda: ConfigRecordItem),)


class RecordDict(Message):
    """In the Fleet API a message's content travels as objects; this stays empty (but present)."""
    FIELDS = ()


# -- message.proto -----------------------------------------------------------------------------------
class Metadata(Message):
    FIELDS = (Field(1, "run_id", UINT64), Field(2, "message_id", STRING), Field(3, "src_node_id", UINT64),
              Field(4, "dst_node_id", UINT64), Field(5, "reply_to_message_id", STRING),
              Field(6, "group_id", STRING), Field(7, "ttl", DOUBLE), Field(8, "message_type", STRING),
              Field(9, "created_at", DOUBLE),
              Field(10, "src_task_id", UINT64), Field(11, "dst_task_id", UINT64))  # both `optional`


class FlwrMessage(Message):
    FIELDS = (Field(1, "metadata", MESSAGE, msg=lambda: Metadata),
              Field(2, "content", MESSAGE, msg=lambda: RecordDict),
              Field(3, "error", MESSAGE, msg=lambda: Error))


class ObjectTree(Message):
    FIELDS = (Field(1, "object_id", STRING),
              Field(2, "children", MESSAGE, repeated=True, msg=lambda: ObjectTree))


class PushObjectRequest(Message):
    FIELDS = (Field(1, "node", MESSAGE, msg=lambda: Node), Field(2, "run_id", UINT64),
              Field(3, "object_id", STRING), Field(4, "object_content", BYTES), Field(5, "session_id", STRING))


class PushObjectResponse(Message):
    FIELDS = (Field(1, "stored", _BOOL),)


class PullObjectRequest(Message):
    FIELDS = (Field(1, "node", MESSAGE, msg=lambda: Node), Field(2, "run_id", UINT64),
              Field(3, "object_id", STRING))


class PullObjectResponse(Message):
    FIELDS = (Field(1, "object_found", _BOOL), Field(2, "object_available", _BOOL),
              Field(3, "object_content", BYTES))


class ConfirmMessageReceivedRequest(Message):
    FIELDS = (Field(1, "node", MESSAGE, msg=lambda: Node), Field(2, "run_id", UINT64),
              Field(3, "message_object_id", STRING))


class Empty(Message):
    """Responses without fields (DeactivateNode, UnregisterNode, ConfirmMessageReceived)."""
    FIELDS = ()


# -- fleet.proto, heartbeat.proto --------------------------------------------------------------------
class RegisterNodeRequest(Message):
    FIELDS = (Field(1, "public_key", BYTES),)


class NodeIdResponse(Message):
    """RegisterNodeFleetResponse and ActivateNodeResponse."""
    FIELDS = (Field(1, "node_id", UINT64),)


class ActivateNodeRequest(Message):
    FIELDS = (Field(1, "public_key", BYTES), Field(2, "heartbeat_interval", DOUBLE))


class NodeIdRequest(Message):
    """DeactivateNodeRequest and UnregisterNodeFleetRequest."""
    FIELDS = (Field(1, "node_id", UINT64),)


class SendNodeHeartbeatRequest(Message):
    FIELDS = (Field(1, "node", MESSAGE, msg=lambda: Node), Field(2, "heartbeat_interval", DOUBLE))


class SendNodeHeartbeatResponse(Message):
    FIELDS = (Field(1, "success", _BOOL),)


class Reconnect(Message):
    FIELDS = (Field(1, "reconnect", UINT64),)


class PullMessagesRequest(Message):
    FIELDS = (Field(1, "node", MESSAGE, msg=lambda: Node), Field(2, "message_ids", STRING, repeated=True))


class PullMessagesResponse(Message):
    FIELDS = (Field(1, "reconnect", MESSAGE, msg=lambda: Reconnect),
              Field(2, "messages_list", MESSAGE, repeated=True, msg=lambda: FlwrMessage),
              Field(3, "message_object_trees", MESSAGE, repeated=True, msg=lambda: ObjectTree))


class PushMessagesRequest(Message):
    FIELDS = (Field(1, "node", MESSAGE, msg=lambda: Node),
              Field(2, "messages_list", MESSAGE, repeated=True, msg=lambda: FlwrMessage),
              Field(3, "message_object_trees", MESSAGE, repeated=True, msg=lambda: ObjectTree),
              Field(4, "clientapp_runtime_list", DOUBLE, repeated=True, packed=True))


class ResultsEntry(Message):
    FIELDS = (Field(1, "key", STRING), Field(2, "value", UINT64))


class PushMessagesResponse(Message):
    FIELDS = (Field(1, "reconnect", MESSAGE, msg=lambda: Reconnect),
              Field(2, "results", MESSAGE, repeated=True, msg=lambda: ResultsEntry),
              Field(3, "objects_to_push", STRING, repeated=True), Field(4, "session_id", STRING))
