"""The gradients of a scatter (ScatterElements, ScatterND) given the flat positions it wrote.

y = scatter(data, pos, updates, reduction); for each position q of y the contributors are data[q]
and every updates[j] with pos[j] == q:

* none: y[q] is the update written last at q (data[q] where nothing was written), so dy[q] goes
  to that one update only; data[q] and overwritten updates get 0 (exact for repeated indices,
  where torch's scatter backward hands dy to every duplicate).
* add: every contributor gets dy[q].
* mul: a contributor gets dy[q] times the product of the other contributors (zeros handled
  exactly by counting them, as torch's scatter_reduce "prod" backward does).
* max / min: the contributors equal to y[q] share dy[q] evenly (torch's scatter_reduce
  "amax"/"amin" backward with include_self=True).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.errors import KernelError
from pytrain.ops.shape._indices import last_writers


def scatter_grads(op: str, node: str, dY: np.ndarray, pos: np.ndarray, reduction: str,
                  data: Optional[np.ndarray], updates: Optional[np.ndarray], Y: Optional[np.ndarray],
                  want_data: bool, want_updates: bool) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """(dData, dUpdates), each None when not wanted; dData shaped like dY, dUpdates like pos."""
    g = dY.reshape(-1)
    p = pos.reshape(-1)
    d_data = d_upd = None
    if reduction in ("none", "add"):
        if want_data:
            if reduction == "none":
                d_data = np.array(dY, copy=True, order="C")
                d_data.reshape(-1)[p] = 0
            else:
                d_data = dY
        if want_updates:
            d_upd = np.take(g, p)
            if reduction == "none":
                d_upd = np.where(last_writers(p, g.size), d_upd, np.zeros((), dtype=dY.dtype))
            d_upd = d_upd.reshape(pos.shape)
        return d_data, d_upd
    if data is None or updates is None or Y is None:
        raise KernelError("%s node %r: reduction %r needs data, updates and the forward output"
                          % (op, node, reduction))
    x = data.reshape(-1).astype(dY.dtype, copy=False)
    u = updates.reshape(-1).astype(dY.dtype, copy=False)
    zero = np.zeros((), dtype=dY.dtype)
    if reduction == "mul":
        # P[q]: product of the non-zero contributors at q; Z[q]: how many contributors are zero
        n_zero = (x == 0).astype(np.intp) + np.bincount(p[u == 0], minlength=x.size).astype(np.intp)
        prod = np.where(x == 0, np.ones((), dtype=dY.dtype), x)
        np.multiply.at(prod, p, np.where(u == 0, np.ones((), dtype=dY.dtype), u))

        def others(c: np.ndarray, at: Optional[np.ndarray]) -> np.ndarray:
            pq = prod if at is None else np.take(prod, at)
            zq = n_zero if at is None else np.take(n_zero, at)
            safe = np.where(c == 0, np.ones((), dtype=dY.dtype), c)
            return np.where(c != 0, np.where(zq == 0, pq / safe, zero), np.where(zq == 1, pq, zero))

        if want_data:
            d_data = (g * others(x, None)).reshape(dY.shape)
        if want_updates:
            d_upd = (np.take(g, p) * others(u, p)).reshape(pos.shape)
        return d_data, d_upd
    if reduction not in ("max", "min"):
        raise KernelError("%s node %r: unknown reduction %r" % (op, node, reduction))
    y = Y.reshape(-1).astype(dY.dtype, copy=False)
    hit_x = x == y
    hit_u = u == np.take(y, p)
    count = hit_x.astype(np.float64) + np.bincount(p, weights=hit_u.astype(np.float64), minlength=x.size)
    share = g / np.maximum(count, 1.0).astype(dY.dtype)  # count 0 only where y is NaN: no gradient there
    if want_data:
        d_data = np.where(hit_x, share, zero).reshape(dY.shape)
    if want_updates:
        d_upd = np.where(hit_u, np.take(share, p), zero).reshape(pos.shape)
    return d_data, d_upd


def add_at_positions(dY: np.ndarray, pos: np.ndarray, shape: tuple) -> np.ndarray:
    """Zeros of ``shape`` with ``dY`` added at the flat positions ``pos`` (shaped like dY; repeats
    accumulate): the gradient of any gather. One bincount, summed in float64 (repeats lose no precision)
    and much faster than np.add.at in the browser's numpy 1.17."""
    sums = np.bincount(pos.reshape(-1), weights=dY.reshape(-1), minlength=int(np.prod(shape, dtype=np.int64)))
    return sums.astype(dY.dtype, copy=False).reshape(shape)
