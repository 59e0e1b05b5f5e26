"""Layer 4, the engine: a graph's facts, a model checked where it enters, planned once and compiled into one
straight-line function (plan-time fusions, buffer reuse), inference sessions, inference export and LoRA."""
from __future__ import annotations
