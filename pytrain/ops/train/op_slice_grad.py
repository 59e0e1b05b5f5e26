"""SliceGrad: the gradient of Slice."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel
from pytrain.ops.train._shapes import norm_axis


def onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice selecting what ONNX Slice selects along an axis of length ``dim``."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    # ONNX end -1 means "through index 0", which a Python slice spells as None.
    return slice(start, end if end >= 0 else None, step)


@kernel("SliceGrad", domain=PYTRAIN_DOMAIN)
def slice_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               axes: Optional[np.ndarray] = None, steps: Optional[np.ndarray] = None) -> tuple:
    """dX = zeros like X with dY written where Slice(X, starts, ends, axes, steps) read."""
    st = [int(v) for v in np.asarray(starts).reshape(-1)]
    en = [int(v) for v in np.asarray(ends).reshape(-1)]
    ax: List[int] = (list(range(len(st))) if axes is None
                     else [norm_axis(int(v), X.ndim, "SliceGrad axes") for v in np.asarray(axes).reshape(-1)])
    sp = [1] * len(st) if steps is None else [int(v) for v in np.asarray(steps).reshape(-1)]
    if not len(st) == len(en) == len(ax) == len(sp):
        raise KernelError("SliceGrad node %r: starts, ends, axes and steps must have one entry per "
                          "sliced axis, got %d, %d, %d, %d" % (ctx.node_name, len(st), len(en), len(ax), len(sp)))
    index = [slice(None)] * X.ndim
    for s, e, a, k in zip(st, en, ax, sp):
        if k == 0:
            raise KernelError("SliceGrad node %r: steps must not be 0 (axis %d)" % (ctx.node_name, a))
        index[a] = onnx_slice(s, e, k, X.shape[a])
    dX = np.zeros(X.shape, dtype=dY.dtype)
    dX[tuple(index)] = dY
    return (dX,)
