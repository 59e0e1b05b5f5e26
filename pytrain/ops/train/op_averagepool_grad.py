"""AveragePoolGrad: the gradient of AveragePool."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.windows import avg_divisor, geometry, tap_slices


@kernel("AveragePoolGrad", domain=PYTRAIN_DOMAIN)
def averagepool_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, *, auto_pad: str = "NOTSET",
                     ceil_mode: int = 0, count_include_pad: int = 0,
                     dilations: Optional[Sequence[int]] = None,
                     kernel_shape: Optional[Sequence[int]] = None, pads: Optional[Sequence[int]] = None,
                     strides: Optional[Sequence[int]] = None) -> tuple:
    """dX: each dY spread evenly over the input elements of its window (dY / divisor per tap)."""
    op = "AveragePoolGrad node %r" % ctx.node_name
    if not kernel_shape:
        raise InputError("%s: the kernel_shape attribute is required" % op)
    win = geometry(op, X.shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if dY.shape != tuple(X.shape[:2]) + win.out_shape:
        raise InputError("%s: dY has shape %s, expected AveragePool's output shape %s"
                         % (op, dY.shape, tuple(X.shape[:2]) + win.out_shape))
    # A window lying wholly in padding would count 0 elements; it also reads none, so any divisor does.
    scale = (1.0 / np.maximum(avg_divisor(win, count_include_pad), 1.0)).astype(dY.dtype)
    share = dY * scale
    dxp = np.zeros(tuple(X.shape[:2]) + win.padded_shape, dtype=dY.dtype)
    for tap in win.taps():
        dxp[tap_slices(win, tap)] += share
    inner = tuple(slice(pb, pb + i) for i, pb in zip(win.in_shape, win.pads_begin))
    return (np.ascontiguousarray(dxp[(slice(None), slice(None)) + inner]),)
