"""Reductions along axes: sums, means, extremes, norms, arg-extremes, cumulative sums, top-k."""
from __future__ import annotations
