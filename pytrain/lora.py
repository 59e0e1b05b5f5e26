"""Layer 9, a public path. Public path of :mod:`pytrain.generator.lora` (the documented path). Thin: the names live there."""
from __future__ import annotations

from pytrain.generator.lora import *  # noqa: F401,F403
from pytrain.generator.lora import __all__  # noqa: F401
