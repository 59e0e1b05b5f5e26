"""LSTM inference on the wasm kernels (lstm.c): every step of every direction in one call."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops.wasm import F32, kernels, ptr


def lstm(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
         sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
         initial_c: Optional[np.ndarray] = None, P: Optional[np.ndarray] = None, *,
         activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
         activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
         hidden_size: Optional[int] = None, input_forget: int = 0, layout: int = 0,
         output_sequence: int = 0):
    """LSTM (lstm.c) for registry.accelerate: float32, any direction and layout, full sequences, the
    default Sigmoid/Tanh/Tanh gates, no peepholes, clip or input_forget; the input projections through
    the GEMM as the numpy kernel makes them, then the recurrence in one call (the numpy kernel's per-step
    product and a dozen element-wise calls are CRNN's cost in the tab). Anything else, or anything
    malformed, goes to the numpy kernel (which checks and names it)."""
    from pytrain.ops.recurrent.op_lstm import recurrence

    if (X.dtype != F32 or W.dtype != F32 or R.dtype != F32 or P is not None or clip is not None
            or int(input_forget) or (B is not None and B.dtype != F32)):
        return None
    try:
        rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations,
                         clip)
        c0 = np.ascontiguousarray(rec.state_in(initial_c, "initial_c"), dtype=np.float32)
    except Exception:
        return None
    D, T, N, H = rec.D, rec.T, rec.N, rec.H
    if rec.mask is not None or T == 0 or N == 0 or not all(rec.default_acts(d) for d in range(D)):
        return None
    h0 = np.ascontiguousarray(rec.h0, dtype=np.float32)
    xw = np.empty((T, D, N, 4 * H), np.float32)
    for d in range(D):
        xw[:, d] = rec.input_projection(rec.ordered(rec.x, d), W, d)
        xw[:, d] += rec.Rb[d]
    rt = np.ascontiguousarray(np.swapaxes(R, 1, 2))  # (D, H, 4H)
    ys = np.empty((T, D, N, H), np.float32)
    ht, ct = np.empty((D, N, H), np.float32), np.empty((D, N, H), np.float32)
    pre = np.empty(N * 4 * H, np.float32)
    kernels.lstm_steps(ptr(xw), ptr(rt), ptr(h0), ptr(c0), ptr(ys), ptr(ht), ptr(ct), ptr(pre), T, D, N, H)
    y = rec.y_out([ys[:, d] for d in range(D)]) if ctx.wants(0) else None
    return (y, rec.state_out(list(ht)), rec.state_out(list(ct)))
