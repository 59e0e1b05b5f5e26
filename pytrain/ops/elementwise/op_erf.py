"""Erf (numpy has no erf, and Pyodide has no scipy: see pytrain.ops.special)."""
from __future__ import annotations

from pytrain.ops.registry import kernel
from pytrain.ops.special import erf


@kernel("Erf")
def erf_op(ctx, X):
    return (erf(X),)
