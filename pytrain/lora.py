"""Layer 9, a public path. Public path of :mod:`pytrain.engine.lora` (LoRA: settings, selection, insertion,
merge, adapter files). Thin: the names live there."""
from __future__ import annotations

from pytrain.engine.lora import *  # noqa: F401,F403
from pytrain.engine.lora import __all__  # noqa: F401
