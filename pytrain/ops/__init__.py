"""Layer 3, the kernels: numpy kernels, one small module per op (``op_<name>.py``) by family, registered in
:mod:`pytrain.ops.registry`; gradient and optimizer kernels; the pieces the browser's wasm kernels replace."""
from __future__ import annotations

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, get_kernel, kernel, supported_ops

__all__ = ["PYTRAIN_DOMAIN", "OpContext", "get_kernel", "kernel", "supported_ops"]
