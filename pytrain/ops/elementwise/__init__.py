"""Element-wise ops: arithmetic, activations, comparisons, logic, casts."""
from __future__ import annotations
