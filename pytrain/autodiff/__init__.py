"""Layer 5, differentiation: reverse-mode automatic differentiation over ONNX graphs: ``registry`` the rule table
and how a rule reads its node, ``rules/`` the rules (a module per op family), ``engine`` the backward pass."""
from __future__ import annotations

from pytrain.autodiff.engine import build_gradients
from pytrain.base.layout import grad_name
from pytrain.autodiff.registry import gradient
from pytrain.autodiff.rules import differentiable_ops, get_rule

__all__ = ["build_gradients", "differentiable_ops", "get_rule", "grad_name", "gradient"]
