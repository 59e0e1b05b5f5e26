"""Layer 9, a public path. Public path of :mod:`pytrain.device.api` (ONNX Runtime's path). Thin: the names live there."""
from __future__ import annotations

from pytrain.device.api import *  # noqa: F401,F403
from pytrain.device.api import __all__  # noqa: F401
