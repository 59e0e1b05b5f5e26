"""Element-wise ops: arithmetic, activations, comparisons, logic, casts."""
