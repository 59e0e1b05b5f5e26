"""PadGrad: the gradient of Pad, every mode (the rule uses a plain Pad of dY for constant mode)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.common import int_list, norm_axes
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel

_MODES = ("constant", "reflect", "edge", "wrap")


def _at(axis: int, rank: int, where) -> tuple:
    index: List[object] = [slice(None)] * rank
    index[axis] = where
    return tuple(index)


@kernel("PadGrad", domain=PYTRAIN_DOMAIN)
def pad_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, pads: np.ndarray, axes: Optional[np.ndarray] = None,
             *, mode: str = "constant") -> tuple:
    """dX for Y = Pad(X, pads, axes, mode): Pad crops the negative pads off X, then pads the rest;
    so fold every padded position of dY back onto the element of the cropped X it copies (none
    for constant mode), then put the result where the crop came from (zeros where it cut)."""
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in _MODES:
        raise KernelError("PadGrad node %r: mode %r is not one of %s" % (ctx.node_name, mode, ", ".join(_MODES)))
    r = X.ndim
    p = int_list("PadGrad", "pads", pads)
    ax = list(range(r)) if axes is None else list(norm_axes("PadGrad", int_list("PadGrad", "axes", axes), r,
                                                              err=KernelError))
    if len(p) != 2 * len(ax):
        raise KernelError("PadGrad node %r: pads has %d values for %d axes" % (ctx.node_name, len(p), len(ax)))
    begin, end = [0] * r, [0] * r
    for i, a in enumerate(ax):
        begin[a], end[a] = p[i], p[i + len(ax)]
    crop = tuple(slice(max(-b, 0), X.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begin, end)))
    g = dY
    for i in range(r):
        wb, we = max(begin[i], 0), max(end[i], 0)
        if not (wb or we):
            continue
        n = X.shape[i] - max(-begin[i], 0) - max(-end[i], 0)  # the cropped length along axis i
        inner = g[_at(i, r, slice(wb, wb + n))]
        if mode == "constant":  # padded positions hold the constant: no gradient to X
            g = inner
            continue
        # src[j]: the element of the cropped X that position j of the padded axis copies (np.pad
        # with the same mode is what the forward kernel runs, so this is its exact index map)
        src = np.pad(np.arange(n), (wb, we), mode=mode)
        folded = np.array(inner, copy=True)
        for j in list(range(wb)) + list(range(wb + n, wb + n + we)):
            folded[_at(i, r, int(src[j]))] += g[_at(i, r, j)]
        g = folded
    if g.shape == X.shape:
        return (np.ascontiguousarray(g),)
    dX = np.zeros(X.shape, dtype=dY.dtype)
    dX[crop] = g
    return (dX,)
