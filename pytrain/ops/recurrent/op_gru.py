"""GRU (opsets 7, 14, 22), gates in ONNX order z (update), r (reset), h (candidate):

    zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz)
    rt = f(Xt Wr^T + Ht-1 Rr^T + Wbr + Rbr)
    ht = g(Xt Wh^T + rt * (Ht-1 Rh^T + Rbh) + Wbh)      linear_before_reset=1 (torch's form)
    ht = g(Xt Wh^T + (rt * Ht-1) Rh^T + Rbh + Wbh)      linear_before_reset=0
    Ht = (1 - zt) * ht + zt * Ht-1                       computed as torch does: (Ht-1 - ht) * zt + ht

f, g = Sigmoid, Tanh by default (Tanh, Sigmoid and Relu accepted in either place).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.ops import linalg
from pytrain.ops.recurrent.cells import Recurrence
from pytrain.ops.registry import kernel


def recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations,
               clip) -> Recurrence:
    return Recurrence(ctx, "GRU", 3, ("Sigmoid", "Tanh"), X, W, R, B, sequence_lens, initial_h, direction,
                      hidden_size, layout, activations, clip)


def gru_direction(rec: Recurrence, d: int, W: np.ndarray, R: np.ndarray, linear_before_reset: int,
                  cache: Optional[List[tuple]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Direction d over the whole sequence (processing order): (Y (T, N, H), last state (N, H)).
    With ``cache``, appends per step (h_prev, pre_z, pre_r, pre_h, z, r, n, hh) where hh is
    Ht-1 Rh^T + Rbh (linear_before_reset=1) or rt * Ht-1 (linear_before_reset=0)."""
    (f, _), (g, _) = rec.acts[d]
    H = rec.H
    xw = rec.input_projection(rec.ordered(rec.x, d), W, d)
    Rb = rec.Rb[d]
    if linear_before_reset:
        RT = np.ascontiguousarray(R[d].T)
    else:
        RzrT = np.ascontiguousarray(R[d][:2 * H].T)
        RhT = np.ascontiguousarray(R[d][2 * H:].T)
    h = rec.h0[d]
    ys = np.empty((rec.T, rec.N, H), rec.dtype)
    for t in range(rec.T):
        if linear_before_reset:
            hg = linalg.matmul(h, RT) + Rb
        else:
            hg = linalg.matmul(h, RzrT) + Rb[:2 * H]
        pre_z = hg[:, :H] + xw[t][:, :H]
        pre_r = hg[:, H:2 * H] + xw[t][:, H:2 * H]
        z = f(rec.clipped(pre_z))
        r = f(rec.clipped(pre_r))
        if linear_before_reset:
            hh = hg[:, 2 * H:]
            pre_h = xw[t][:, 2 * H:] + hh * r
        else:
            hh = r * h
            pre_h = xw[t][:, 2 * H:] + (linalg.matmul(hh, RhT) + Rb[2 * H:])
        n = g(rec.clipped(pre_h))
        h_new = (h - n) * z + n
        if cache is not None:
            cache.append((h, pre_z, pre_r, pre_h, z, r, n, hh))
        ys[t] = rec.emit(t, h_new)
        h = rec.keep(t, h_new, h)
    return ys, rec.final(h)


@kernel("GRU")
def gru(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
        sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None, *,
        activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
        activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
        hidden_size: Optional[int] = None, layout: int = 0, linear_before_reset: int = 0,
        output_sequence: int = 0) -> tuple:
    rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations, clip)
    ys, hs = [], []
    for d in range(rec.D):
        y, h = gru_direction(rec, d, W, R, int(linear_before_reset))
        ys.append(y)
        hs.append(h)
    return (rec.y_out(ys) if ctx.wants(0) else None, rec.state_out(hs))
