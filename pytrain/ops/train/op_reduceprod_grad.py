"""ReduceProdGrad: the gradient of ReduceProd."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import expand_reduced, reduce_axes


def product_of_others(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """For every element, the product of the other elements of its group (the ``axes`` it is reduced
    over), as prefix products times suffix products: exact where the group holds zeros, where
    Y / X would divide by zero."""
    if not axes or x.size == 0:
        return np.ones_like(x)
    kept = [a for a in range(x.ndim) if a not in axes]
    perm = kept + list(axes)
    moved = np.transpose(x, perm)
    flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
    ones = np.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
    before = np.concatenate([ones, np.cumprod(flat[..., :-1], axis=-1)], axis=-1)
    after = np.concatenate([np.cumprod(flat[..., :0:-1], axis=-1)[..., ::-1], ones], axis=-1)
    others = (before * after).reshape(moved.shape)
    inverse = np.argsort(perm)
    return np.transpose(others, inverse)


@kernel("ReduceProdGrad", domain=PYTRAIN_DOMAIN)
def reduceprod_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, axes_input: Optional[np.ndarray] = None, *,
                    axes: Optional[Sequence[int]] = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> tuple:
    """dX = dY * (product of the other elements of X's group), as torch.prod's backward."""
    red = reduce_axes(X.ndim, axes_input, axes, noop_with_empty_axes, "ReduceProdGrad axes")
    red = () if red is None else red
    g = expand_reduced(dY, red, keepdims)
    out = np.empty(X.shape, dtype=dY.dtype)
    out[...] = g * product_of_others(X.astype(dY.dtype, copy=False), red)
    return (out,)
