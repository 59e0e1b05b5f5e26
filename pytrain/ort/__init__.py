"""Layer 9, a face: ONNX Runtime's ``onnxruntime.training`` API (``artifacts``, ``api``, ``onnxblock``) on pytrain,
with ORT's defaults and conventions: code written for ORT's on-device training changes one import."""
# Code written for ONNX Runtime's on-device training changes one import and nothing else:
#
#     from pytrain.ort import artifacts            # was: from onnxruntime.training import artifacts
#     from pytrain.ort.api import CheckpointState, Module, Optimizer
#     import pytrain.ort.onnxblock as onnxblock
#
# It keeps ORT's defaults and conventions (optimizer hyper-parameters, learning rate 1e-3, OrtValue in and out,
# ``state.parameters`` as (name, Parameter) pairs, nominal checkpoints, ORT's training model interface from
# ``onnxblock.TrainingBlock``) and reads checkpoints ONNX Runtime 1.19 wrote. pytrain's own API
# (``pytrain.artifacts``, ``pytrain.api``) keeps PyTorch's defaults. This package is a layer on pytrain's public
# API; pytrain's core does not know about it.
from __future__ import annotations

__all__ = ["api", "artifacts", "onnxblock"]
