"""Boolean logic with broadcasting: Not, And, Or."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


@kernel("Not")
def not_(ctx, X):
    return (np.asarray(np.logical_not(X)),)


@kernel("And")
def and_(ctx, A, B):
    return (np.asarray(np.logical_and(A, B)),)


@kernel("Or")
def or_(ctx, A, B):
    return (np.asarray(np.logical_or(A, B)),)
