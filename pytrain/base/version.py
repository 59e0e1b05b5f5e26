"""pytrain's version: one line that the package, the models it writes (producer_version) and the
wheel build read."""
from __future__ import annotations

__version__ = "0.1.0"
