"""pytrain: on-device training for ONNX models, in pure Python + numpy."""
from __future__ import annotations

__version__ = "0.1.0"
