"""LSTMGrad: backpropagation through time for ONNX LSTM, one kernel for every input's gradient.

The forward is recomputed (keeping each step's gates), then walked backwards. With gH, gC the
gradients reaching Ht and Ct (gC also through Ht = ot * h(Ct)):

    do = gH * h(Ct);  gC += gH * ot * h'(Ct);  dpre_o = do * f'(o);  gC += dpre_o * Po
    di = gC * ct;  dct = gC * it;  df = gC * Ct-1;  dC_{t-1} = gC * ft
    (input_forget: ft = 1 - it, so di -= df)
    dpre_i = di * f'(i), dpre_f = df * f'(f), dpre_c = dct * g'(ct)   (0 where ``clip`` cut them)
    dC_{t-1} += dpre_i * Pi + dpre_f * Pf;  dP += sums of dpre * the cell state each peephole saw
    dpre = [dpre_i, dpre_o, dpre_f, dpre_c]: dR += dpre^T Ht-1, dXt = dpre W, dH_{t-1} = dpre R.

Padding steps (``sequence_lens``) pass the states' gradients through unchanged.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops import linalg
from pytrain.ops.recurrent.cells import Recurrence, parameter_grads
from pytrain.ops.recurrent.op_lstm import lstm_direction, peepholes, recurrence
from pytrain.ops.registry import PYTRAIN_DOMAIN, kernel


@kernel("LSTMGrad", domain=PYTRAIN_DOMAIN)
def lstm_grad(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
              sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
              initial_c: Optional[np.ndarray] = None, P: Optional[np.ndarray] = None,
              dY: Optional[np.ndarray] = None, dY_h: Optional[np.ndarray] = None,
              dY_c: Optional[np.ndarray] = None, *,
              activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
              activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
              hidden_size: Optional[int] = None, input_forget: int = 0, layout: int = 0,
              output_sequence: int = 0) -> tuple:
    """dX, dW, dR, dB, dinitial_h, dinitial_c, dP of LSTM given dY, dY_h and/or dY_c."""
    rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations, clip)
    c0 = rec.state_in(initial_c, "initial_c")
    P = peepholes(rec, P)
    H, T, N = rec.H, rec.T, rec.N
    dys = rec.dy_in(dY)
    dhs = rec.dstate_in(dY_h, "dY_h")
    dcs = rec.dstate_in(dY_c, "dY_c")
    dpres, h_prevs, dh0, dc0 = [], [], [], []
    dP = np.zeros((rec.D, 3 * H), rec.dtype)
    for d in range(rec.D):
        cache = []
        lstm_direction(rec, d, W, R, P, c0, int(input_forget), cache)
        dpre = np.empty((T, N, 4 * H), rec.dtype)
        if P is None and rec.clip is None and not input_forget and rec.default_acts(d) and rec.mask is None:
            dh, dc = _plain_backward(cache, dys[d], dhs[d], dcs[d], R[d], dpre)
        else:
            dh, dc = _general_backward(rec, d, cache, (dys[d], dhs[d], dcs[d]), R, P, int(input_forget), dpre, dP)
        dpres.append(dpre)
        h_prevs.append(np.stack([c[0] for c in cache]))
        dh0.append(dh)
        dc0.append(dc)
    return node_gradients(ctx, rec, (W, R), dpres, h_prevs, (dh0, dc0), dP)


def node_gradients(ctx, rec: Recurrence, weights: tuple, dpres: Sequence[np.ndarray],
                   h_prevs: Sequence[np.ndarray], d_states: tuple, dP: np.ndarray) -> tuple:
    """LSTMGrad's outputs from each direction's walk back: ``dpres[d]`` (T, N, 4H) the gradient of the gate
    pre-activations at every step (processing order), ``h_prevs[d]`` (T, N, H) the h each step read,
    ``d_states`` the per-direction (dinitial_h, dinitial_c); ``weights`` is (W, R). (The numpy kernel's and the
    browser's wasm recurrence, pytrain/ops/wasm/recurrent.py, share it.)"""
    W, R = weights
    H, T, N = rec.H, rec.T, rec.N
    dxs, dW, dR, dB = [], np.zeros_like(W), np.zeros_like(R), []
    for d in range(rec.D):
        dpre = dpres[d]
        dR[d] = linalg.matmul(np.ascontiguousarray(dpre.reshape(T * N, 4 * H).T), h_prevs[d].reshape(T * N, H))
        dx, dW[d], dwb = parameter_grads(rec, d, rec.ordered(rec.x, d), W, dpre)
        dxs.append(dx)
        dB.append(np.concatenate([dwb, dwb]))
    dh0, dc0 = d_states
    return (rec.x_out(dxs) if ctx.wants(0) else None, dW, dR,
            np.stack(dB).astype(rec.dtype, copy=False) if ctx.wants(3) else None,
            rec.state_out(dh0) if ctx.wants(4) else None,
            rec.state_out(dc0) if ctx.wants(5) else None,
            dP if ctx.wants(6) else None)


def _plain_backward(cache: list, dy: np.ndarray, dh: np.ndarray, dc: np.ndarray, R: np.ndarray,
                    dpre: np.ndarray) -> tuple:
    """The walk back for :func:`op_lstm._plain_direction`'s steps (no peepholes, clip, input_forget
    or padding; Sigmoid/Tanh/Tanh): the three sigmoid gates' derivatives s(1 - s) in one block
    (i, o, f are adjacent), each step's gradient written into ``dpre[t]``; returns (dh0, dc0)."""
    T, N, H4 = dpre.shape
    H = H4 // 4
    u = np.empty((N, 3 * H), dpre.dtype)
    for t in range(T - 1, -1, -1):
        h_prev, c_prev, pre, i, fg, cc, o, c_new, hc, sig = cache[t]
        gh = dy[t] + dh
        gc = hc * hc
        np.subtract(1, gc, out=gc)
        gc *= o
        gc *= gh
        gc += dc
        np.multiply(gc, cc, out=u[:, :H])
        np.multiply(gh, hc, out=u[:, H:2 * H])
        np.multiply(gc, c_prev, out=u[:, 2 * H:])
        g = dpre[t]
        ds = np.subtract(1, sig, out=g[:, :3 * H])
        ds *= sig
        ds *= u
        gcc = np.multiply(cc, cc, out=g[:, 3 * H:])
        np.subtract(1, gcc, out=gcc)
        gcc *= gc
        gcc *= i
        dc = gc * fg
        dh = np.matmul(g, R)
    return dh, dc


def _general_backward(rec, d: int, cache: list, grads: tuple, R: np.ndarray, P: Optional[np.ndarray],
                      input_forget: int, dpre: np.ndarray, dP: np.ndarray) -> tuple:
    """The walk back of any LSTM step (peepholes, clip, input_forget, padding, other activations)."""
    (_, dfa), (_, dga), (_, dha) = rec.acts[d]
    H, T = rec.H, rec.T
    zero = rec.dtype.type(0)
    dys, dh, dc = grads
    if P is not None:
        pi, po, pf = P[d, :H], P[d, H:2 * H], P[d, 2 * H:]
    for t in range(T - 1, -1, -1):
        h_prev, c_prev, pre, i, fg, cc, o, c_new, hc = cache[t][:9]
        gh = rec.valid(t, dys[t] + dh)
        gc = rec.valid(t, dc) + gh * o * dha(hc)
        g = dpre[t]
        g[:, H:2 * H] = rec.clip_grad(gh * hc * dfa(o), pre[:, H:2 * H])
        if P is not None:
            gc = gc + g[:, H:2 * H] * po
            dP[d, H:2 * H] += np.sum(g[:, H:2 * H] * c_new, axis=0)
        di = gc * cc
        dfg = gc * c_prev
        if input_forget:
            di = di - dfg
            g[:, 2 * H:3 * H] = zero
        else:
            g[:, 2 * H:3 * H] = rec.clip_grad(dfg * dfa(fg), pre[:, 2 * H:3 * H])
        g[:, :H] = rec.clip_grad(di * dfa(i), pre[:, :H])
        g[:, 3 * H:] = rec.clip_grad(gc * i * dga(cc), pre[:, 3 * H:])
        dc_prev = gc * fg
        if P is not None:
            dc_prev = dc_prev + g[:, :H] * pi + g[:, 2 * H:3 * H] * pf
            dP[d, :H] += np.sum(g[:, :H] * c_prev, axis=0)
            dP[d, 2 * H:] += np.sum(g[:, 2 * H:3 * H] * c_prev, axis=0)
        dh = rec.carried(t, linalg.matmul(g, R[d]), dh)
        dc = rec.carried(t, dc_prev, dc)
    return dh, dc
