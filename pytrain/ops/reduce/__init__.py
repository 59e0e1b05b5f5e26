"""Reductions along axes: sums, means, extremes, norms, arg-extremes, cumulative sums, top-k."""
