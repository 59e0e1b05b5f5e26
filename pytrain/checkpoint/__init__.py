"""Layer 2, formats: the checkpoint: parameters (trainable and frozen), optimizer state and user properties, in
pytrain's zip format (written and read) or ONNX Runtime 1.19's flatbuffer (read), through ``CheckpointState``."""
from __future__ import annotations

from pytrain.checkpoint.state import READERS, CheckpointState, decode_any
from pytrain.checkpoint.values import OptimizerState, Parameter, Properties, Property
from pytrain.checkpoint.zip_format import FORMAT, VERSION, decode, encode, encode_chunks

__all__ = ["CheckpointState", "FORMAT", "OptimizerState", "Parameter", "Properties", "Property", "READERS",
           "VERSION", "decode", "decode_any", "encode", "encode_chunks"]
