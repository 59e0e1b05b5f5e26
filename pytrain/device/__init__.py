"""Layer 6, the runtime API: what a device needs to train artifacts: ``Module``, ``Optimizer``, ``CheckpointState``,
``LinearLRScheduler``, and the artifacts ONNX Runtime's generator made, read by ORT's conventions."""
from __future__ import annotations
