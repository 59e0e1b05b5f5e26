"""Reading checkpoints ONNX Runtime 1.19 writes (its flatbuffer format), in pure Python."""
from __future__ import annotations

#: ORT's checkpoint flatbuffers carry this file identifier at bytes 4..8
FILE_IDENTIFIER = b"ODTC"


def is_ort_checkpoint(head: bytes) -> bool:
    return len(head) >= 8 and head[4:8] == FILE_IDENTIFIER


def load(data: bytes):  # noqa: ANN201 - replaced below
    raise NotImplementedError
