"""Layer 0, the base: what every other layer may use and which imports nothing of pytrain but its errors:
size limits, atomic files, dtypes, opset history, the artifact layout's names, the version."""
from __future__ import annotations
