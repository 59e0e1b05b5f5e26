"""Comparisons with broadcasting, bool output: Equal, Less, LessOrEqual, Greater, GreaterOrEqual."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


@kernel("Equal")
def equal(ctx, A, B):
    return (np.asarray(np.equal(A, B), dtype=np.bool_),)


@kernel("Less")
def less(ctx, A, B):
    return (np.asarray(np.less(A, B)),)


@kernel("LessOrEqual")
def less_or_equal(ctx, A, B):
    return (np.asarray(np.less_equal(A, B)),)


@kernel("Greater")
def greater(ctx, A, B):
    return (np.asarray(np.greater(A, B)),)


@kernel("GreaterOrEqual")
def greater_or_equal(ctx, A, B):
    return (np.asarray(np.greater_equal(A, B)),)
