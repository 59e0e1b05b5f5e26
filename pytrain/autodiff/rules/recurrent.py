"""Gradient rules of the ops in ``pytrain/ops/recurrent``: RNN, GRU, LSTM. See
:mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


# ---- recurrent layers (RNN, GRU, LSTM) ---------------------------------------------------------
def _recurrent(b: B, n: N, dy: G, grad_op: str, n_inputs: int, n_outputs: int) -> G:
    # One BPTT kernel per op (it recomputes the forward): inputs are the forward's inputs then dY,
    # dY_h(, dY_c); outputs are the gradients of every input but sequence_lens, in input order.
    ins = [n.x(i) for i in range(n_inputs)] + [dy[k] if k < len(dy) else None for k in range(n_outputs)]
    positions = [i for i in range(n_inputs) if i != 4]
    outs = b.pt_outputs(grad_op, ins, [n.x(i) is not None and n.needs(i) for i in positions], **n.attrs)
    grads: G = [None] * n_inputs
    for i, g in zip(positions, outs):
        grads[i] = g
    return grads


@gradient("RNN", inputs=(0, 1, 2, 3, 5))
def _rnn(b: B, n: N, dy: G) -> G:
    return _recurrent(b, n, dy, "RNNGrad", 6, 2)


@gradient("GRU", inputs=(0, 1, 2, 3, 5))
def _gru(b: B, n: N, dy: G) -> G:
    return _recurrent(b, n, dy, "GRUGrad", 6, 2)


@gradient("LSTM", inputs=(0, 1, 2, 3, 5, 6, 7))
def _lstm(b: B, n: N, dy: G) -> G:
    return _recurrent(b, n, dy, "LSTMGrad", 8, 3)
