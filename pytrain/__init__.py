"""pytrain: on-device training for ONNX models, in pure Python + numpy."""
from __future__ import annotations

from pytrain.base.version import __version__  # noqa: F401

from pytrain.generator.torch_export import torch_export  # noqa: E402,F401  (imports torch only when called)
