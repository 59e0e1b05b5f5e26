"""Layer 9, a public path. Public path of :mod:`pytrain.generator.blocks` (the documented path). Thin: the names live there."""
from __future__ import annotations

from pytrain.generator.blocks import *  # noqa: F401,F403
