"""Conv (1-D, 2-D and N-D; strides, pads, auto_pad, dilations, groups) as one matmul per group over
the strided window view of the padded input (im2col with the batch folded into the columns)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.registry import kernel
from pytrain.ops.windows import batch_first, conv_columns, geometry


@kernel("Conv")
def conv(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    if X.ndim < 3 or W.ndim != X.ndim:
        raise InputError("Conv: X %s and W %s must both be (N, C, d1, ...) / (M, C/group, k1, ...) "
                         "of the same rank >= 3" % (X.shape, W.shape))
    n, c = X.shape[0], X.shape[1]
    m, cg = W.shape[0], W.shape[1]
    group = int(group)
    if group < 1 or c % group or m % group or cg * group != c:
        raise InputError("Conv: X has %d channels and W %s; with group=%d W.shape[1] must be "
                         "C/group and M=%d divisible by group" % (c, W.shape, group, m))
    ks = list(W.shape[2:]) if not kernel_shape else list(kernel_shape)
    if tuple(ks) != tuple(W.shape[2:]):
        raise InputError("Conv: kernel_shape %s does not match W's spatial shape %s" % (ks, W.shape[2:]))
    win = geometry("Conv", X.shape, ks, strides, dilations, pads, auto_pad)
    # The batch folded into the columns: one (M/G, C/G*K) @ (C/G*K, N*L) product per group,
    # large enough for a fast GEMM (and the browser's wasm kernel) instead of N small ones.
    cols = conv_columns(X, win, group)  # (G, C/G*K, L*N)
    y = linalg.matmul(W.reshape(group, m // group, -1), cols)  # (G, M/G, L*N)
    y = batch_first(np.asarray(y, dtype=X.dtype).reshape((m,) + win.out_shape + (n,)))
    if B is not None:
        if B.shape != (m,):
            raise InputError("Conv: bias B must have shape (%d,), got %s" % (m, B.shape))
        y += B.reshape((m,) + (1,) * win.rank)
    return (y,)
