"""Kernels of the ``ai.onnx.ml`` domain that pytrain's own exports use (a table's text columns)."""
from __future__ import annotations
