"""What RNN, GRU and LSTM share: their attributes checked once, the layouts, the directions,
``sequence_lens``, and the gate activations with their derivatives.

Every direction runs in *processing order*: the forward direction reads the sequence as it is; the
reverse direction reads each batch entry's valid steps backwards (step k is time ``len - 1 - k``),
so with ``sequence_lens`` both directions see valid steps first and padding last. Padding steps are
masked: the state passes through unchanged and the output is zero, so the final state is the
state after the last valid step, as onnxruntime and torch's packed sequences compute (an empty
sequence's final state is zero, as in onnxruntime).
The backward (BPTT) runs over the same processing order.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError, UnsupportedOpError
from pytrain.ops import linalg
from pytrain.ops.elementwise.op_activation import sigmoid


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


# name -> (f, f' expressed through y = f(x)): the backward only keeps gate outputs
ACTIVATIONS: Dict[str, Tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "sigmoid": (sigmoid, lambda y: y * (1 - y)),
    "tanh": (np.tanh, lambda y: 1 - y * y),
    "relu": (_relu, lambda y: (y > 0).astype(y.dtype)),
}

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}

Act = Tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]


class Recurrence:
    """One recurrent node's inputs, checked against its attributes, in time-major form.

    x: (T, N, I); h0: (D, N, H); Wb, Rb: (D, G*H); lens: (N,) or None (every sequence full);
    acts[d]: the direction's activations as (f, f'); reverse[d]: whether direction d runs backwards.
    """

    def __init__(self, ctx, op: str, n_gates: int, default_acts: Sequence[str], X: np.ndarray,
                 W: np.ndarray, R: np.ndarray, B: Optional[np.ndarray], sequence_lens: Optional[np.ndarray],
                 initial_h: Optional[np.ndarray], direction: str, hidden_size: Optional[int], layout: int,
                 activations: Optional[Sequence[str]], clip: Optional[float]) -> None:
        self.what = "%s node %r" % (op, ctx.node_name)
        if direction not in _DIRECTIONS:
            raise GraphError("%s: direction %r, expected forward, reverse or bidirectional" % (self.what, direction))
        if layout not in (0, 1):
            raise GraphError("%s: layout %r, expected 0 ([seq, batch, ...]) or 1 ([batch, seq, ...])"
                             % (self.what, layout))
        self.reverse = _DIRECTIONS[direction]
        self.layout = int(layout)
        D = len(self.reverse)
        if X.ndim != 3 or W.ndim != 3 or R.ndim != 3:
            raise InputError("%s: X %s, W %s and R %s must all be 3-D" % (self.what, X.shape, W.shape, R.shape))
        if X.dtype.kind != "f":
            raise UnsupportedOpError("%s: X has dtype %s; recurrent layers take float tensors" % (self.what, X.dtype))
        H = int(hidden_size) if hidden_size is not None else R.shape[-1]
        G = n_gates
        x = X if self.layout == 0 else np.swapaxes(X, 0, 1)
        T, N, I = x.shape
        for name, v, want in (("W", W, (D, G * H, I)), ("R", R, (D, G * H, H)), ("B", B, (D, 2 * G * H))):
            if v is not None and v.shape != want:
                raise InputError("%s: %s has shape %s, expected %s (direction=%s, hidden_size=%d, %d gates)"
                                 % (self.what, name, v.shape, want, direction, H, G))
        self.x, self.T, self.N, self.I, self.H, self.D, self.G = x, T, N, I, H, D, G
        self.dtype = X.dtype
        bias = B if B is not None else np.zeros((D, 2 * G * H), X.dtype)
        self.Wb, self.Rb = bias[:, :G * H], bias[:, G * H:]
        self.h0 = self.state_in(initial_h, "initial_h")

        names = list(activations) if activations else list(default_acts) * D
        if len(names) != len(default_acts) * D:
            raise GraphError("%s: %d activations %s, expected %d (%d per direction)"
                             % (self.what, len(names), names, len(default_acts) * D, len(default_acts)))
        self.acts: List[List[Act]] = []
        for d in range(D):
            row = []
            for name in names[d * len(default_acts):(d + 1) * len(default_acts)]:
                key = name.decode() if isinstance(name, bytes) else str(name)
                if key.lower() not in ACTIVATIONS:
                    raise UnsupportedOpError("%s: activation %r is not supported (supported: Sigmoid, Tanh, Relu)"
                                             % (self.what, key))
                row.append(ACTIVATIONS[key.lower()])
            self.acts.append(row)
        if clip is not None and not float(clip) > 0:
            raise GraphError("%s: clip=%r, expected a positive threshold" % (self.what, clip))
        self.clip = None if clip is None else X.dtype.type(clip)

        self.lens = None
        self.mask = None
        self._order = None
        self._empty = None
        if sequence_lens is not None:
            lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
            if lens.shape != (N,) or np.any(lens < 0) or np.any(lens > T):
                raise InputError("%s: sequence_lens %s must hold %d lengths in [0, %d]"
                                 % (self.what, np.asarray(sequence_lens).tolist(), N, T))
            if np.any(lens < T):
                self.lens = lens
                steps = np.arange(T)[:, None]
                self.mask = (steps < lens[None, :])[:, :, None]  # (T, N, 1)
                # time read at step k by a reverse direction: len-1-k on valid steps, k on padding
                self._order = np.where(steps < lens[None, :], lens[None, :] - 1 - steps, steps)
                if np.any(lens == 0):
                    self._empty = (lens == 0)[:, None]

    def default_acts(self, d: int) -> bool:
        """Whether direction d's gates are the default Sigmoid, Tanh, Tanh."""
        f, g, h = self.acts[d]
        return f is ACTIVATIONS["sigmoid"] and g is ACTIVATIONS["tanh"] and h is ACTIVATIONS["tanh"]

    # ---- layouts and processing order ------------------------------------------------------------
    def state_in(self, v: Optional[np.ndarray], name: str) -> np.ndarray:
        """An initial state input as (D, N, H) (zeros when absent)."""
        if v is None:
            return np.zeros((self.D, self.N, self.H), self.dtype)
        want = (self.D, self.N, self.H) if self.layout == 0 else (self.N, self.D, self.H)
        if v.shape != want:
            raise InputError("%s: %s has shape %s, expected %s" % (self.what, name, v.shape, want))
        return v if self.layout == 0 else np.swapaxes(v, 0, 1)

    def state_out(self, states: Sequence[np.ndarray]) -> np.ndarray:
        """Per-direction (N, H) states as Y_h / Y_c (or as d initial_h in initial_h's layout)."""
        s = np.stack(states)
        return s if self.layout == 0 else np.ascontiguousarray(np.swapaxes(s, 0, 1))

    def ordered(self, seq: np.ndarray, d: int) -> np.ndarray:
        """A time-major (T, N, ...) sequence in direction d's processing order (its own inverse)."""
        if not self.reverse[d]:
            return seq
        if self.lens is None:
            return seq[::-1]
        return seq[self._order, np.arange(self.N)[None, :]]

    def y_out(self, ys: Sequence[np.ndarray]) -> np.ndarray:
        """Per-direction (T, N, H) outputs in processing order as Y in the node's layout."""
        y = np.stack([self.ordered(v, d) for d, v in enumerate(ys)], axis=1)  # (T, D, N, H)
        return y if self.layout == 0 else np.ascontiguousarray(np.transpose(y, (2, 0, 1, 3)))

    def dy_in(self, dY: Optional[np.ndarray]) -> List[np.ndarray]:
        """dY (in the layout of Y) per direction, in processing order; padding steps zeroed."""
        if dY is None:
            return [np.zeros((self.T, self.N, self.H), self.dtype) for _ in range(self.D)]
        want = (self.T, self.D, self.N, self.H) if self.layout == 0 else (self.N, self.T, self.D, self.H)
        if dY.shape != want:
            raise InputError("%s: dY has shape %s, expected %s" % (self.what, dY.shape, want))
        g = dY if self.layout == 0 else np.transpose(dY, (1, 2, 0, 3))
        out = []
        for d in range(self.D):
            v = self.ordered(g[:, d], d)
            out.append(v if self.mask is None else np.where(self.mask, v, self.dtype.type(0)))
        return out

    def final(self, state: np.ndarray) -> np.ndarray:
        """A direction's last state as Y_h / Y_c: zero for an empty sequence (sequence_lens 0), as
        onnxruntime gives, rather than the initial state."""
        return state if self._empty is None else np.where(self._empty, self.dtype.type(0), state)

    def dstate_in(self, dS: Optional[np.ndarray], name: str) -> np.ndarray:
        """dY_h / dY_c as (D, N, H) (zeros when absent; and on empty sequences, see :meth:`final`)."""
        if dS is None:
            return np.zeros((self.D, self.N, self.H), self.dtype)
        return np.stack([self.final(v) for v in self.state_in(dS, name)])

    def x_out(self, dxs: Sequence[np.ndarray]) -> np.ndarray:
        """Per-direction dX (T, N, I) in processing order, summed, in X's layout."""
        total = self.ordered(dxs[0], 0)
        for d in range(1, len(dxs)):
            total = total + self.ordered(dxs[d], d)
        return total if self.layout == 0 else np.ascontiguousarray(np.swapaxes(total, 0, 1))

    # ---- one step ----------------------------------------------------------------------------------
    def input_projection(self, x: np.ndarray, W: np.ndarray, d: int) -> np.ndarray:
        """x @ W[d]^T + Wb[d] for every step at once: (T, N, G*H) (torch precomputes it too)."""
        xw = linalg.matmul(x.reshape(self.T * self.N, self.I), np.ascontiguousarray(W[d].T))
        return (xw + self.Wb[d]).reshape(self.T, self.N, -1)

    def clipped(self, pre: np.ndarray) -> np.ndarray:
        """The ``clip`` attribute: gate pre-activations bounded to [-clip, clip]."""
        return pre if self.clip is None else np.clip(pre, -self.clip, self.clip)

    def clip_grad(self, dpre: np.ndarray, pre: np.ndarray) -> np.ndarray:
        """Gradient through :meth:`clipped` (torch.clamp: passes where -clip <= pre <= clip)."""
        if self.clip is None:
            return dpre
        return np.where(np.abs(pre) <= self.clip, dpre, self.dtype.type(0))

    def keep(self, t: int, new: np.ndarray, old: np.ndarray) -> np.ndarray:
        """The state after step t: ``new`` on valid rows, ``old`` carried through padding."""
        return new if self.mask is None else np.where(self.mask[t], new, old)

    def emit(self, t: int, h: np.ndarray) -> np.ndarray:
        """Y at step t: ``h`` on valid rows, zero on padding."""
        return h if self.mask is None else np.where(self.mask[t], h, self.dtype.type(0))

    def carried(self, t: int, from_step: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The gradient reaching the state before step t: what the step gives on its valid rows, and
        ``g`` (the gradient after the step) unchanged on padding rows, which the step skipped."""
        return from_step if self.mask is None else np.where(self.mask[t], from_step, g)

    def valid(self, t: int, g: np.ndarray) -> np.ndarray:
        """A state gradient restricted to step t's valid rows."""
        return g if self.mask is None else np.where(self.mask[t], g, self.dtype.type(0))


def parameter_grads(rec: Recurrence, d: int, x: np.ndarray, W: np.ndarray, dxw: np.ndarray
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the gradient of the input projection (T, N, G*H) of direction d: dX (processing
    order), dW[d] and dWb[d]."""
    flat = dxw.reshape(rec.T * rec.N, -1)
    dx = linalg.matmul(flat, W[d]).reshape(rec.T, rec.N, rec.I)
    dw = linalg.matmul(np.ascontiguousarray(flat.T), x.reshape(rec.T * rec.N, rec.I))
    return dx, dw, flat.sum(axis=0)
