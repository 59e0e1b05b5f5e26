"""GRUGrad: backpropagation through time for ONNX GRU, one kernel for every input's gradient.

The forward is recomputed (keeping each step's gates), then walked backwards. With Ht =
(1 - zt) * nt + zt * Ht-1 and gH the gradient reaching Ht:

    dz = gH * (Ht-1 - nt);  dn = gH * (1 - zt);  dH_{t-1} = gH * zt
    dpre_h = dn * g'(nt)                                           (0 where ``clip`` cut it)
    linear_before_reset=1: dr = dpre_h * (Ht-1 Rh^T + Rbh); the hidden side of gate h gets dpre_h * rt
    linear_before_reset=0: d(rt*Ht-1) = dpre_h Rh; dr = that * Ht-1; dH_{t-1} += that * rt;
                           dRh += dpre_h^T (rt*Ht-1)
    dpre_z = dz * f'(zt), dpre_r = dr * f'(rt)
    [dpre_z, dpre_r, dpre_h] feed dW, dWb, dX; the hidden-side gradients feed dR, dRb, dH_{t-1}.

Padding steps (``sequence_lens``) pass the state's gradient through unchanged.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops import linalg
from pytrain.ops.recurrent.cells import parameter_grads
from pytrain.ops.recurrent.op_gru import gru_direction, recurrence
from pytrain.ops.registry import PYTRAIN_DOMAIN, kernel


@kernel("GRUGrad", domain=PYTRAIN_DOMAIN)
def gru_grad(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
             sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
             dY: Optional[np.ndarray] = None, dY_h: Optional[np.ndarray] = None, *,
             activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
             activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
             hidden_size: Optional[int] = None, layout: int = 0, linear_before_reset: int = 0,
             output_sequence: int = 0) -> tuple:
    """dX, dW, dR, dB, dinitial_h of GRU(X, W, R, B, sequence_lens, initial_h) given dY and/or dY_h."""
    rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations, clip)
    lbr = int(linear_before_reset)
    H, T, N = rec.H, rec.T, rec.N
    dys = rec.dy_in(dY)
    dhs = rec.dstate_in(dY_h, "dY_h")
    dxs, dW, dR, dB, dh0 = [], np.zeros_like(W), np.zeros_like(R), [], []
    for d in range(rec.D):
        cache = []
        gru_direction(rec, d, W, R, lbr, cache)
        (_, dfa), (_, dga) = rec.acts[d]
        dxw = np.empty((T, N, 3 * H), rec.dtype)   # gradient of the input side of every gate
        dhg = np.empty((T, N, 3 * H), rec.dtype)   # ... of the hidden side (Ht-1 R^T + Rb, per gate)
        dh = dhs[d]
        for t in range(T - 1, -1, -1):
            h_prev, pre_z, pre_r, pre_h, z, r, n, hh = cache[t]
            gh = rec.valid(t, dys[d][t] + dh)
            dpre_h = rec.clip_grad(gh * (1 - z) * dga(n), pre_h)
            dh_prev = gh * z
            if lbr:
                dr = dpre_h * hh
                dhg[t, :, 2 * H:] = dpre_h * r
            else:
                drh = linalg.matmul(dpre_h, R[d][2 * H:])
                dr = drh * h_prev
                dh_prev = dh_prev + drh * r
                dhg[t, :, 2 * H:] = dpre_h
            dxw[t, :, :H] = dhg[t, :, :H] = rec.clip_grad(gh * (h_prev - n) * dfa(z), pre_z)
            dxw[t, :, H:2 * H] = dhg[t, :, H:2 * H] = rec.clip_grad(dr * dfa(r), pre_r)
            dxw[t, :, 2 * H:] = dpre_h
            if lbr:
                dh_prev = dh_prev + linalg.matmul(dhg[t], R[d])
            else:
                dh_prev = dh_prev + linalg.matmul(dhg[t, :, :2 * H], R[d][:2 * H])
            dh = rec.carried(t, dh_prev, dh)
        dh0.append(dh)
        h_prevs = np.stack([c[0] for c in cache]).reshape(T * N, H)
        flat = dhg.reshape(T * N, 3 * H)
        if lbr:
            dR[d] = linalg.matmul(np.ascontiguousarray(flat.T), h_prevs)
        else:
            rh = np.stack([c[7] for c in cache]).reshape(T * N, H)
            dR[d][:2 * H] = linalg.matmul(np.ascontiguousarray(flat[:, :2 * H].T), h_prevs)
            dR[d][2 * H:] = linalg.matmul(np.ascontiguousarray(flat[:, 2 * H:].T), rh)
        dx, dW[d], dwb = parameter_grads(rec, d, rec.ordered(rec.x, d), W, dxw)
        dxs.append(dx)
        dB.append(np.concatenate([dwb, flat.sum(axis=0)]))
    return (rec.x_out(dxs) if ctx.wants(0) else None, dW, dR,
            np.stack(dB).astype(rec.dtype, copy=False) if ctx.wants(3) else None,
            rec.state_out(dh0) if ctx.wants(4) else None)
