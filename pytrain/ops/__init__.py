"""Layer 3, the kernels. Numpy kernels, one small module per op (``op_<name>.py``); see :mod:`pytrain.ops.registry`."""
from __future__ import annotations

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, get_kernel, kernel, supported_ops

__all__ = ["PYTRAIN_DOMAIN", "OpContext", "get_kernel", "kernel", "supported_ops"]
