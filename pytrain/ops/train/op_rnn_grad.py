"""RNNGrad: backpropagation through time for ONNX RNN, one kernel for every input's gradient.

The forward is recomputed (keeping each step's state and pre-activation), then walked backwards:
with a_t = f(pre_t), pre_t = Xt W^T + Ht-1 R^T + Wb + Rb and g_t the gradient reaching Ht,

    dpre_t = g_t * f'(pre_t)   (0 where ``clip`` cut pre_t)
    dW += dpre_t^T Xt, dR += dpre_t^T Ht-1, dWb = dRb += sum(dpre_t), dXt = dpre_t W,
    g_{t-1} = dY_{t-1} + dpre_t R.

Padding steps (``sequence_lens``) pass the state's gradient through unchanged.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops import linalg
from pytrain.ops.recurrent.cells import parameter_grads
from pytrain.ops.recurrent.op_rnn import recurrence, rnn_direction
from pytrain.ops.registry import PYTRAIN_DOMAIN, kernel


@kernel("RNNGrad", domain=PYTRAIN_DOMAIN)
def rnn_grad(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
             sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
             dY: Optional[np.ndarray] = None, dY_h: Optional[np.ndarray] = None, *,
             activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
             activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
             hidden_size: Optional[int] = None, layout: int = 0, output_sequence: int = 0) -> tuple:
    """dX, dW, dR, dB, dinitial_h of RNN(X, W, R, B, sequence_lens, initial_h) given dY and/or dY_h."""
    rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations, clip)
    dys = rec.dy_in(dY)
    dhs = rec.dstate_in(dY_h, "dY_h")
    dxs, dW, dR, dB, dh0 = [], np.zeros_like(W), np.zeros_like(R), [], []
    for d in range(rec.D):
        cache = []
        rnn_direction(rec, d, W, R, cache)
        df = rec.acts[d][0][1]
        dpre = np.empty((rec.T, rec.N, rec.H), rec.dtype)
        dh = dhs[d]
        for t in range(rec.T - 1, -1, -1):
            h_prev, pre, h_new = cache[t]
            g = rec.valid(t, dys[d][t] + dh)
            dpre[t] = rec.clip_grad(g * df(h_new), pre)
            dh = rec.carried(t, linalg.matmul(dpre[t], R[d]), dh)
        dh0.append(dh)
        h_prevs = np.stack([c[0] for c in cache]).reshape(rec.T * rec.N, rec.H)
        flat = dpre.reshape(rec.T * rec.N, rec.H)
        dR[d] = linalg.matmul(np.ascontiguousarray(flat.T), h_prevs)
        dx, dW[d], dwb = parameter_grads(rec, d, rec.ordered(rec.x, d), W, dpre)
        dxs.append(dx)
        dB.append(np.concatenate([dwb, dwb]))
    return (rec.x_out(dxs) if ctx.wants(0) else None, dW, dR,
            np.stack(dB).astype(rec.dtype, copy=False) if ctx.wants(3) else None,
            rec.state_out(dh0) if ctx.wants(4) else None)
