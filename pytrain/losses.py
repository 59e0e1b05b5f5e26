"""Layer 9, a public path. Public path of :mod:`pytrain.generator.losses` (the documented path). Thin: the names live there."""
from __future__ import annotations

from pytrain.generator.losses import *  # noqa: F401,F403
