"""LSTM (opsets 7, 14, 22), gates in ONNX order i (input), o (output), f (forget), c (cell):

    it = f(Xt Wi^T + Ht-1 Ri^T + Pi * Ct-1 + Wbi + Rbi)
    ft = f(Xt Wf^T + Ht-1 Rf^T + Pf * Ct-1 + Wbf + Rbf)      ft = 1 - it when input_forget=1
    ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc)
    Ct = ft * Ct-1 + it * ct
    ot = f(Xt Wo^T + Ht-1 Ro^T + Po * Ct + Wbo + Rbo)
    Ht = ot * h(Ct)

f, g, h = Sigmoid, Tanh, Tanh by default (Tanh, Sigmoid and Relu accepted in any place); P (the
peepholes Pi, Po, Pf), initial_h, initial_c and sequence_lens optional; outputs Y, Y_h, Y_c.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.elementwise.op_activation import sigmoid
from pytrain.ops.recurrent.cells import Recurrence
from pytrain.ops.registry import kernel


def recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations,
               clip) -> Recurrence:
    return Recurrence(ctx, "LSTM", 4, ("Sigmoid", "Tanh", "Tanh"), X, W, R, B, sequence_lens, initial_h,
                      direction, hidden_size, layout, activations, clip)


def peepholes(rec: Recurrence, P: Optional[np.ndarray]) -> Optional[np.ndarray]:
    if P is not None and P.shape != (rec.D, 3 * rec.H):
        raise InputError("%s: P has shape %s, expected %s" % (rec.what, P.shape, (rec.D, 3 * rec.H)))
    return P


def lstm_direction(rec: Recurrence, d: int, W: np.ndarray, R: np.ndarray, P: Optional[np.ndarray],
                   c0: np.ndarray, input_forget: int, cache: Optional[List[tuple]] = None
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Direction d over the whole sequence (processing order): (Y (T, N, H), last h, last c).
    With ``cache``, appends per step (h_prev, c_prev, pre (N, 4H) with peepholes added, i, f, c~, o,
    C, h(C)) and, from :func:`_plain_direction`, the (N, 3H) block of i, o, f."""
    (fa, _), (ga, _), (ha, _) = rec.acts[d]
    H = rec.H
    xw = rec.input_projection(rec.ordered(rec.x, d), W, d)
    RT = np.ascontiguousarray(R[d].T)
    if P is None and rec.clip is None and not input_forget and rec.default_acts(d):
        return _plain_direction(rec, d, xw, RT, c0, cache)
    if P is not None:
        pi, po, pf = P[d, :H], P[d, H:2 * H], P[d, 2 * H:]
    h, c = rec.h0[d], c0[d]
    ys = np.empty((rec.T, rec.N, H), rec.dtype)
    for t in range(rec.T):
        pre = (linalg.matmul(h, RT) + rec.Rb[d]) + xw[t]  # torch: linear_hh(h) + linear_ih(x)
        if P is not None:
            pre[:, :H] += pi * c
            pre[:, 2 * H:3 * H] += pf * c
        i = fa(rec.clipped(pre[:, :H]))
        fg = 1 - i if input_forget else fa(rec.clipped(pre[:, 2 * H:3 * H]))
        cc = ga(rec.clipped(pre[:, 3 * H:]))
        c_new = fg * c + i * cc
        if P is not None:
            pre[:, H:2 * H] += po * c_new
        o = fa(rec.clipped(pre[:, H:2 * H]))
        hc = ha(c_new)
        h_new = o * hc
        if cache is not None:
            cache.append((h, c, pre, i, fg, cc, o, c_new, hc))
        ys[t] = rec.emit(t, h_new)
        h = rec.keep(t, h_new, h)
        c = rec.keep(t, c_new, c)
    return ys, rec.final(h), rec.final(c)


def _plain_direction(rec: Recurrence, d: int, xw: np.ndarray, RT: np.ndarray, c0: np.ndarray,
                     cache: Optional[List[tuple]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`lstm_direction` without peepholes, clip or input_forget, gates Sigmoid/Tanh/Tanh: the
    recurrent bias folded into the input projection once, each step's pre-activations written into
    one preallocated (T, N, 4H) block, the three sigmoid gates (i, o, f: adjacent in ONNX's order)
    in one call (a dozen numpy calls a step instead of two dozen: CRNN's steps are N x 4H = 8 x 256)."""
    H = rec.H
    xw += rec.Rb[d]
    pres = np.empty_like(xw)
    h, c = rec.h0[d], c0[d]
    ys = np.empty((rec.T, rec.N, H), rec.dtype)
    for t in range(rec.T):
        pre = pres[t]
        np.matmul(h, RT, out=pre)
        pre += xw[t]
        sig = sigmoid(pre[:, :3 * H])
        i, o, fg = sig[:, :H], sig[:, H:2 * H], sig[:, 2 * H:]
        cc = np.tanh(pre[:, 3 * H:])
        c_new = fg * c
        c_new += i * cc
        hc = np.tanh(c_new)
        if rec.mask is None:
            h_new = np.multiply(o, hc, out=ys[t])
        else:
            h_new = o * hc
            ys[t] = rec.emit(t, h_new)
        if cache is not None:
            cache.append((h, c, pre, i, fg, cc, o, c_new, hc, sig))
        h = rec.keep(t, h_new, h)
        c = rec.keep(t, c_new, c)
    return ys, rec.final(h), rec.final(c)


def _both_directions(rec: Recurrence, W: np.ndarray, R: np.ndarray, c0: np.ndarray
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A bidirectional :func:`_plain_direction` (inference: no cache, every sequence full) with the
    two directions stepped together, forward step t beside backward step T-1-t: one (2, N, H) @
    (2, H, 4H) product and one call per gate a step instead of two (CRNN's steps are 8 x 256, where
    the calls, not the arithmetic, are the cost), and all four gates from one exp (a step of CRNN's
    LSTM 69-94 -> 41-72 us against the two-exp sigmoid and the cell gate's tanh, loaded machine).
    Returns Y (T, 2, N, H) in the node's layout and the last (2, N, H) h and c."""
    H, T, N = rec.H, rec.T, rec.N
    # both directions' input projections as one product over the sequence in time order (the backward
    # direction's rows then read in reverse), the biases added as input_projection and
    # _plain_direction add them: (x W^T + Wb) + Rb
    proj = linalg.matmul(rec.x.reshape(T * N, -1), linalg.transposed(W.reshape(8 * H, -1)))
    proj = proj.reshape(T, N, 2, 4 * H)
    xw = np.empty((T, 2, N, 4 * H), rec.dtype)
    for d in range(2):
        np.add(proj[::-1, :, d] if rec.reverse[d] else proj[:, :, d], rec.Wb[d], out=xw[:, d])
        xw[:, d] += rec.Rb[d]
    # every gate from one exp a step: the sigmoid gates i, o, f are 1 / (1 + exp(-z)) and the cell
    # gate tanh(z) = 2 / (1 + exp(-2z)) - 1, their scales -1 and -2 folded into R and the input
    # projection once (exact: powers of two); exp overflowing to inf gives the gate's 0 (or -1)
    scale = np.array([-1.0] * 3 + [-2.0], rec.dtype).repeat(H)
    xw *= scale
    RT = np.ascontiguousarray(np.swapaxes(R, 1, 2)) * scale  # (2, H, 4H)
    h, c = rec.h0, c0
    ys = np.empty((T, 2, rec.N, H), rec.dtype)
    pre = np.empty((2, rec.N, 4 * H), rec.dtype)
    i, o, f, g = (pre[..., k * H:(k + 1) * H] for k in range(4))
    one, two = rec.dtype.type(1), rec.dtype.type(2)
    with np.errstate(over="ignore"):
        for t in range(T):
            np.matmul(h, RT, out=pre)
            pre += xw[t]
            np.exp(pre, out=pre)
            pre += one
            np.reciprocal(pre, out=pre)
            g *= two
            g -= one
            c_new = f * c
            c_new += i * g
            h = np.multiply(o, np.tanh(c_new), out=ys[t])
            c = c_new
    h = h.copy()  # (a view of ys[T-1], about to be reordered)
    ys[:, 1] = ys[::-1, 1].copy()  # the backward direction's outputs in time order
    y = ys if rec.layout == 0 else np.ascontiguousarray(np.transpose(ys, (2, 0, 1, 3)))
    return y, h, c


@kernel("LSTM")
def lstm(ctx, X: np.ndarray, W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray] = None,
         sequence_lens: Optional[np.ndarray] = None, initial_h: Optional[np.ndarray] = None,
         initial_c: Optional[np.ndarray] = None, P: Optional[np.ndarray] = None, *,
         activation_alpha: Optional[Sequence[float]] = None, activation_beta: Optional[Sequence[float]] = None,
         activations: Optional[Sequence[str]] = None, clip: Optional[float] = None, direction: str = "forward",
         hidden_size: Optional[int] = None, input_forget: int = 0, layout: int = 0,
         output_sequence: int = 0) -> tuple:
    rec = recurrence(ctx, X, W, R, B, sequence_lens, initial_h, direction, hidden_size, layout, activations, clip)
    c0 = rec.state_in(initial_c, "initial_c")
    P = peepholes(rec, P)
    if (rec.D == 2 and P is None and rec.clip is None and not int(input_forget) and rec.mask is None
            and rec.default_acts(0) and rec.default_acts(1)):
        y, h, c = _both_directions(rec, W, R, c0)
        return (y if ctx.wants(0) else None, rec.state_out(list(h)), rec.state_out(list(c)))
    ys, hs, cs = [], [], []
    for d in range(rec.D):
        y, h, c = lstm_direction(rec, d, W, R, P, c0, int(input_forget))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return (rec.y_out(ys) if ctx.wants(0) else None, rec.state_out(hs), rec.state_out(cs))
