"""TopK: the K largest (or smallest) elements along an axis and their indices.

K is the attribute ``k`` in opset 1 and a one-element int64 input from opset 10; ``largest`` and
``sorted`` arrive in opset 11. Ties go to the lower index first, as the spec requires; the result
is always sorted (``sorted=0`` leaves the order unspecified, so sorted is conformant). NaN counts
as larger than every number (as numpy's sort and torch.topk order it).
"""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import norm_axis, scalar_of
from pytrain.ops.registry import kernel


def topk_indices(x: np.ndarray, k: int, axis: int, largest: bool) -> np.ndarray:
    """Indices of the k extreme elements along ``axis`` (non-negative), best first, ties lower index first."""
    n = x.shape[axis]
    if largest:
        # A stable ascending sort of the flipped axis, read backwards, is a descending order
        # in which equal values keep their original (lower index first) order.
        asc = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(asc, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    return np.take(order, np.arange(k), axis=axis).astype(np.int64)


@kernel("TopK")
def top_k(ctx, X, K=None, *, axis=-1, largest=1, sorted=1, k=None):
    if K is not None:
        if np.asarray(K).size != 1:
            raise InputError("TopK: input K must hold one value, got shape %s" % (np.asarray(K).shape,))
        kk = int(scalar_of("TopK", "K", K, 0))
    elif k is not None:
        kk = int(k)
    else:
        raise GraphError("TopK: needs the input K (opset >= 10) or the attribute k (opset 1)")
    if X.ndim == 0:
        raise InputError("TopK: input X must have rank >= 1, got a scalar")
    ax = norm_axis("TopK", axis, X.ndim)
    if not 0 <= kk <= X.shape[ax]:
        raise InputError("TopK: K=%d must be in 0..%d (the size of axis %d of X, shape %s)"
                         % (kk, X.shape[ax], ax, X.shape))
    idx = topk_indices(X, kk, ax, bool(largest))
    return (np.take_along_axis(X, idx, axis=ax), idx)
