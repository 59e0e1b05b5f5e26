"""Floating-point class tests, bool output: IsNaN, IsInf.

Every schema version (IsNaN 9/13/20, IsInf 10/20) means the same; the later ones only add element
types (bfloat16, float8), which pytrain refuses where the model is loaded."""
from __future__ import annotations

import numpy as np

from pytrain.ops.registry import kernel


@kernel("IsNaN")
def is_nan(ctx, X):
    return (np.asarray(np.isnan(X), dtype=np.bool_),)


@kernel("IsInf")
def is_inf(ctx, X, *, detect_negative=1, detect_positive=1):
    if detect_negative and detect_positive:
        return (np.asarray(np.isinf(X), dtype=np.bool_),)
    # detect_negative=0 (or positive=0) keeps only one sign; both 0 flags nothing
    want = np.zeros(X.shape, dtype=np.bool_)
    if detect_positive:
        want = np.asarray(np.isposinf(X), dtype=np.bool_)
    elif detect_negative:
        want = np.asarray(np.isneginf(X), dtype=np.bool_)
    return (want,)
