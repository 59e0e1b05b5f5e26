"""``CheckpointState`` (ORT's name): a training run's parameters, optimizer state and properties,
loaded from and saved to a file or bytes."""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Tuple, Union

from pytrain.base import limits
from pytrain.checkpoint import ort_format
from pytrain.checkpoint.values import OptimizerState, Parameter, Properties
from pytrain.checkpoint.zip_format import decode, encode
from pytrain.errors import CheckpointError
from pytrain.base.files import remove_stale_temporaries, write_atomic

#: other checkpoint formats load_checkpoint reads: (probe(data) -> bool, decode(data, label)), tried in
#: order before pytrain's own format; decode returns what :func:`pytrain.checkpoint.zip_format.decode` returns
READERS: "List[Tuple[Callable[[bytes], bool], Callable[[bytes, str], Any]]]" = [
    (ort_format.is_ort_checkpoint, ort_format.decode),  # ONNX Runtime 1.19's flatbuffer checkpoints
]


def decode_any(data: bytes, label: str) -> Any:
    """Decode pytrain's checkpoint format or any format in READERS."""
    for probe, read in READERS:
        if probe(data):
            return read(data, label)
    return decode(data, label)


class CheckpointState:
    """Parameters, optimizer state and properties of a training run (ORT's CheckpointState)."""

    def __init__(self, parameters: "OrderedDict[str, Parameter]", properties: Optional[Properties] = None,
                 optimizer_state: Optional[OptimizerState] = None) -> None:
        self.parameters = parameters
        self.properties = properties if properties is not None else Properties()
        self.optimizer_state = optimizer_state

    @classmethod
    def load_checkpoint(cls, checkpoint: Union[str, "os.PathLike[str]", bytes, bytearray]) -> "CheckpointState":
        """Load from a path or from bytes; CheckpointError when missing, corrupted or truncated."""
        if isinstance(checkpoint, (bytes, bytearray, memoryview)):
            return cls(*decode_any(bytes(checkpoint), "(bytes)"))
        if not isinstance(checkpoint, (str, os.PathLike)):
            raise CheckpointError("load_checkpoint takes a path or bytes, got %s" % type(checkpoint).__name__)
        path = os.fspath(checkpoint)
        remove_stale_temporaries(path)  # left by a save that was killed
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        limits.check_file(size, "checkpoint file %s" % path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CheckpointError("checkpoint file %s does not exist" % path) from None
        except IsADirectoryError:
            raise CheckpointError("checkpoint path %s is a directory, expected a file" % path) from None
        return cls(*decode_any(data, path))

    def to_bytes(self, include_optimizer_state: bool = True) -> bytes:
        """The checkpoint file's content, without touching a file system."""
        return encode(self.parameters, self.properties,
                      self.optimizer_state if include_optimizer_state else None)

    @staticmethod
    def save_checkpoint(state: "CheckpointState", checkpoint_uri: Union[str, "os.PathLike[str]"],
                        include_optimizer_state: bool = False) -> None:
        """Write atomically: a crash mid-save leaves the previous checkpoint intact."""
        write_atomic(checkpoint_uri, state.to_bytes(include_optimizer_state))

    @property
    def nominal(self) -> bool:
        """True when parameters carry shapes only (fill them with Module.copy_buffer_to_parameters)."""
        return any(p.data is None for p in self.parameters.values())

    def __repr__(self) -> str:
        return "CheckpointState(%d parameters, %d properties%s)" % (
            len(self.parameters), len(self.properties),
            ", optimizer step %d" % self.optimizer_state.step if self.optimizer_state else "")
