"""SplitGrad: the gradient of Split."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import norm_axis


@kernel("SplitGrad", domain=PYTRAIN_DOMAIN)
def split_grad(ctx: OpContext, *args: Optional[np.ndarray], axis: int = 0) -> tuple:
    """Inputs Y1..Yn, dY1..dYn: dX = the dYi concatenated along ``axis``; a missing dYi is zeros like Yi."""
    if len(args) % 2:
        raise KernelError("SplitGrad node %r: expected the n outputs Y1..Yn then their n gradients, "
                          "got %d inputs" % (ctx.node_name, len(args)))
    n = len(args) // 2
    ys, dys = args[:n], args[n:]
    present = [g for g in dys if g is not None]
    if not present:
        raise KernelError("SplitGrad node %r: every gradient input is missing" % ctx.node_name)
    dtype = present[0].dtype
    a = norm_axis(axis, present[0].ndim, "SplitGrad axis")
    pieces = [g if g is not None else np.zeros(y.shape, dtype) for y, g in zip(ys, dys)]
    return (np.concatenate(pieces, axis=a),)
