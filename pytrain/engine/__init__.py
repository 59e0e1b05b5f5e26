"""Layer 4, the engine: a graph's facts, a model checked where it enters, planned once and compiled into
one straight-line function (with plan-time fusions and buffer reuse), inference sessions and inference export."""
from __future__ import annotations
