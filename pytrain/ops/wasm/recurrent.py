"""LSTM on the wasm kernels (lstm.c): inference's and LSTMGrad's recurrence, every step of every direction in
one call."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from pytrain.ops.wasm import F32, kernels, ptr


def _plain_recurrence(ctx, inputs: tuple, attrs: dict):
    """(Recurrence, c0 as contiguous float32) for the LSTMs the kernels take: float32, full sequences, the default
    Sigmoid/Tanh/Tanh gates, no peepholes, clip or input_forget, T and N not 0; None for anything else, or
    anything malformed (the numpy kernel checks and names it). ``inputs`` is (X, W, R, B, sequence_lens,
    initial_h, initial_c, P)."""
    from pytrain.ops.recurrent.op_lstm import recurrence

    X, W, R, B, sequence_lens, initial_h, initial_c, P = inputs
    if (X.dtype != F32 or W.dtype != F32 or R.dtype != F32 or P is not None or attrs["clip"] is not None
            or int(attrs["input_forget"]) or (B is not None and B.dtype != F32)):
        return None
    try:
        rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, attrs["direction"], attrs["hidden_size"],
                         attrs["layout"], attrs["activations"], attrs["clip"])
        c0 = np.ascontiguousarray(rec.state_in(initial_c, "initial_c"), dtype=np.float32)
    except Exception:
        return None
    if rec.mask is not None or rec.T == 0 or rec.N == 0 or not all(rec.default_acts(d) for d in range(rec.D)):
        return None
    return rec, c0


def _projections(rec, W: np.ndarray, shape: tuple, time_major: bool) -> np.ndarray:
    """Each direction's input projection plus both biases in its processing order, as the numpy kernels make
    it: (T, D, N, 4H) when ``time_major``, else (D, T, N, 4H)."""
    xw = np.empty(shape, np.float32)
    for d in range(rec.D):
        v = xw[:, d] if time_major else xw[d]
        v[...] = rec.input_projection(rec.ordered(rec.x, d), W, d)
        v += rec.Rb[d]
    return xw


def lstm(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
         sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
         initial_c: Optional[np.ndarray] = None, P: Optional[np.ndarray] = None, *,
         activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
         activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
         hidden_size: Optional[int] = None, input_forget: int = 0, layout: int = 0,
         output_sequence: int = 0):
    """LSTM (lstm.c lstm_steps) for registry.accelerate, for what :func:`_plain_recurrence` takes: the input
    projections through the GEMM as the numpy kernel makes them, then the recurrence in one call (the numpy
    kernel's per-step product and a dozen element-wise calls are CRNN's cost in the tab)."""
    got = _plain_recurrence(ctx, (X, W, R, B, sequence_lens, initial_h, initial_c, P),
                            dict(clip=clip, input_forget=input_forget, direction=direction, hidden_size=hidden_size,
                                 layout=layout, activations=activations))
    if got is None:
        return None
    rec, c0 = got
    D, T, N, H = rec.D, rec.T, rec.N, rec.H
    h0 = np.ascontiguousarray(rec.h0, dtype=np.float32)
    xw = _projections(rec, W, (T, D, N, 4 * H), True)
    rt = np.ascontiguousarray(np.swapaxes(R, 1, 2))  # (D, H, 4H)
    ys = np.empty((T, D, N, H), np.float32)
    ht, ct = np.empty((D, N, H), np.float32), np.empty((D, N, H), np.float32)
    pre = np.empty(N * 4 * H, np.float32)
    kernels.lstm_steps(ptr(xw), ptr(rt), ptr(h0), ptr(c0), ptr(ys), ptr(ht), ptr(ct), ptr(pre), T, D, N, H)
    y = rec.y_out([ys[:, d] for d in range(D)]) if ctx.wants(0) else None
    return (y, rec.state_out(list(ht)), rec.state_out(list(ct)))


def lstm_grad(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
              sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
              initial_c: Optional[np.ndarray] = None, P: Optional[np.ndarray] = None,
              dY: Optional[np.ndarray] = None, dY_h: Optional[np.ndarray] = None,
              dY_c: Optional[np.ndarray] = None, *,
              activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
              activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
              hidden_size: Optional[int] = None, input_forget: int = 0, layout: int = 0,
              output_sequence: int = 0):
    """LSTMGrad (lstm.c lstm_grad_steps) for registry.accelerate, for what :func:`_plain_recurrence` takes with
    float32 gradients: the forward recomputed keeping each step's gates, C and tanh(C), then walked back, every
    step of every direction in one call (in numpy ~two dozen calls a step, half of CRNN's training step in the
    tab); the products for dX, dW, dR and the outputs as the numpy kernel (op_lstm_grad.node_gradients)."""
    from pytrain.ops.train.op_lstm_grad import node_gradients

    if any(g is not None and g.dtype != F32 for g in (dY, dY_h, dY_c)):
        return None
    got = _plain_recurrence(ctx, (X, W, R, B, sequence_lens, initial_h, initial_c, P),
                            dict(clip=clip, input_forget=input_forget, direction=direction, hidden_size=hidden_size,
                                 layout=layout, activations=activations))
    if got is None:
        return None
    rec, c0 = got
    D, T, N, H = rec.D, rec.T, rec.N, rec.H
    try:
        dy = np.ascontiguousarray(np.stack(rec.dy_in(dY)), dtype=np.float32)  # (D, T, N, H)
        dh = np.array(rec.dstate_in(dY_h, "dY_h"), dtype=np.float32, order="C")
        dc = np.array(rec.dstate_in(dY_c, "dY_c"), dtype=np.float32, order="C")
    except Exception:
        return None
    h0 = np.ascontiguousarray(rec.h0, dtype=np.float32)
    xw = _projections(rec, W, (D, T, N, 4 * H), False)
    rt = np.ascontiguousarray(np.swapaxes(R, 1, 2))  # (D, H, 4H)
    ys, cs, hc = (np.empty((D, T, N, H), np.float32) for _ in range(3))
    g = np.empty((D, T, N, 4 * H), np.float32)
    pre = np.empty(N * 4 * H, np.float32)
    kernels.lstm_grad_steps(ptr(xw), ptr(rt), ptr(h0), ptr(c0), ptr(dy), ptr(ys), ptr(cs), ptr(hc), ptr(g),
                            ptr(dh), ptr(dc), ptr(pre), T, D, N, H)
    h_prevs = [np.concatenate([h0[d][None], ys[d, :-1]]) for d in range(D)]
    return node_gradients(ctx, rec, (W, R), list(g), h_prevs, (list(dh), list(dc)), np.zeros((D, 3 * H), np.float32))
