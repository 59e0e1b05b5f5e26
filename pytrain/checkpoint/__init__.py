"""Layer 2, formats. The checkpoint: parameters (trainable and frozen), optimizer state and user properties, in
pytrain's zip format (:mod:`.zip_format`, written and read) or ONNX Runtime 1.19's flatbuffer
(:mod:`.ort_format`, read). ``CheckpointState`` (:mod:`.state`) loads either and saves pytrain's."""
from __future__ import annotations

from pytrain.checkpoint.state import READERS, CheckpointState, decode_any
from pytrain.checkpoint.values import OptimizerState, Parameter, Properties, Property
from pytrain.checkpoint.zip_format import FORMAT, VERSION, decode, encode

__all__ = ["CheckpointState", "FORMAT", "OptimizerState", "Parameter", "Properties", "Property", "READERS",
           "VERSION", "decode", "decode_any", "encode"]
