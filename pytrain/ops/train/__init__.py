"""Kernels of pytrain's own domain (ai.pytrain): training-mode forward ops, gradient ops, optimizer updates."""
from __future__ import annotations
