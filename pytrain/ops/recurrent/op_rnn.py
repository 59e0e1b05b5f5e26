"""RNN (opsets 7, 14, 22): Ht = f(Xt Wi^T + Ht-1 Ri^T + Wbi + Rbi), f = Tanh by default.

Attributes as the spec: direction, hidden_size, layout, activations (Tanh, Sigmoid or Relu;
activation_alpha/beta are ignored since none of these takes them), clip; sequence_lens and
initial_h optional; outputs Y and Y_h (see :mod:`pytrain.ops.recurrent.cells`).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.ops import linalg
from pytrain.ops.recurrent.cells import Recurrence
from pytrain.ops.registry import kernel


def recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations,
               clip) -> Recurrence:
    return Recurrence(ctx, "RNN", 1, ("Tanh",), X, W, R, B, sequence_lens, initial_h, direction,
                      hidden_size, layout, activations, clip)


def rnn_direction(rec: Recurrence, d: int, W: np.ndarray, R: np.ndarray,
                  cache: Optional[List[tuple]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Direction d over the whole sequence (processing order): (Y (T, N, H), last state (N, H)).
    With ``cache``, appends (h_prev, pre-activation, h_new) per step for the backward."""
    f = rec.acts[d][0][0]
    xw = rec.input_projection(rec.ordered(rec.x, d), W, d)
    RT = np.ascontiguousarray(R[d].T)
    h = rec.h0[d]
    ys = np.empty((rec.T, rec.N, rec.H), rec.dtype)
    for t in range(rec.T):
        pre = (linalg.matmul(h, RT) + rec.Rb[d]) + xw[t]  # torch: linear_hh(h) + linear_ih(x)
        h_new = f(rec.clipped(pre))
        if cache is not None:
            cache.append((h, pre, h_new))
        ys[t] = rec.emit(t, h_new)
        h = rec.keep(t, h_new, h)
    return ys, rec.final(h)


@kernel("RNN")
def rnn(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
        sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None, *,
        activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
        activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
        hidden_size: Optional[int] = None, layout: int = 0, output_sequence: int = 0) -> tuple:
    rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations, clip)
    ys, hs = [], []
    for d in range(rec.D):
        y, h = rnn_direction(rec, d, W, R)
        ys.append(y)
        hs.append(h)
    return (rec.y_out(ys) if ctx.wants(0) else None, rec.state_out(hs))
