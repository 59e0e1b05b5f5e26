"""Reverse-mode automatic differentiation over ONNX graphs (see registry.py for the rule table)."""
from __future__ import annotations

from pytrain.autodiff.engine import build_gradients, grad_name
from pytrain.autodiff.registry import differentiable_ops, get_rule, gradient

__all__ = ["build_gradients", "differentiable_ops", "get_rule", "grad_name", "gradient"]
