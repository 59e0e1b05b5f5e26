"""pytrain: on-device training for ONNX models, in pure Python + numpy."""
from __future__ import annotations

__version__ = "0.1.0"

from pytrain.torch_export import torch_export  # noqa: E402  (imports torch only when called)
