"""Layer 9, a public path. Public path of :mod:`pytrain.generator.artifacts` (ONNX Runtime's path). Thin: the names live there."""
from __future__ import annotations

from pytrain.generator.artifacts import *  # noqa: F401,F403
from pytrain.generator.artifacts import __all__  # noqa: F401
