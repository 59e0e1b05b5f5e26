"""web/kernels/lstm.c's LSTMGrad recurrence (lstm_grad_steps) run in Node.js through kernels.js, driven by the
browser's own routing (pytrain/ops/wasm/recurrent.py lstm_grad) against the numpy LSTMGrad kernel it stands in
for. Same harness as tests/web/test_wasm_gemm.py (the committed kernels.wasm and a fresh build)."""
from __future__ import annotations

import numpy as np
import pytest

from test_wasm_gemm import _call_kernels, wasm_path  # noqa: F401  (wasm_path is a fixture)

from pytrain.ops import OpContext, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.ops.wasm import recurrent

#: lstm_grad_steps' pointer arguments that it reads (the rest it writes; dh and dc both)
_READ = (0, 1, 2, 3, 4, 9, 10)
_WRITTEN = (5, 6, 7, 8, 9, 10)


class _NodeKernels:
    """pytrain.ops.wasm's ``kernels`` and ``ptr`` for recurrent.py, in Node: a pointer is an index into the
    arrays handed over, and a call runs the kernel on copies of them, then writes what it wrote back."""

    def __init__(self, wasm, tmp) -> None:
        self.wasm, self.tmp, self.arrays, self.calls = wasm, tmp, [], 0

    def ptr(self, a: np.ndarray) -> int:
        assert a.dtype == np.float32 and a.flags.c_contiguous
        self.arrays.append(a)
        return len(self.arrays) - 1

    def lstm_grad_steps(self, *args) -> None:
        arrays = [self.arrays[p] for p in args[:12]]
        bufs = [{"len": a.size, "fill": i in _READ} for i, a in enumerate(arrays)]
        case = {"fn": "lstm_grad_steps", "buffers": bufs, "read": list(_WRITTEN),
                "args": ["$%d" % i for i in range(12)] + list(args[12:])}
        got = _call_kernels(self.wasm, self.tmp, [case], [arrays[i] for i in _READ])
        for i, g in zip(_WRITTEN, got):
            arrays[i].ravel()[...] = g
        self.calls += 1


def _case(rng, T, N, I, H, D, saturate=False):
    X = rng.standard_normal((T, N, I)).astype(np.float32)
    W = (rng.standard_normal((D, 4 * H, I)) * 0.7).astype(np.float32)
    if saturate:
        W[0, :H] *= 40  # input gates past +-20
        W[-1, 3 * H:] *= 40  # cell gates
    R = (rng.standard_normal((D, 4 * H, H)) * 0.5).astype(np.float32)
    B = rng.standard_normal((D, 8 * H)).astype(np.float32)
    return X, W, R, B


CASES = {
    # direction, layout, initial states, (dY, dY_h, dY_c) given, saturated gates, NaN in a sample
    "bidirectional": ("bidirectional", 0, True, (True, True, True), True, False),
    "forward": ("forward", 0, False, (True, False, False), False, False),
    "reverse-layout1": ("reverse", 1, True, (False, True, True), False, False),
    "nan-sample": ("bidirectional", 0, False, (True, False, True), False, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_lstm_grad_steps_equal_the_numpy_lstm_grad(wasm_path, tmp_path, monkeypatch, name):
    """LSTMGrad through the wasm recurrence (forward keeping the gates, then back, every step of every direction in
    one call) gives the numpy kernel's dX, dW, dR, dB, dinitial_h, dinitial_c: odd sizes, both directions alone and
    together, both layouts, with and without initial states and each output's gradient, saturated gates, and a NaN
    in one sample (NaN where numpy has it, the other samples' entries finite and equal)."""
    direction, layout, states, given, saturate, nan = CASES[name]
    rng = np.random.default_rng(41)
    T, N, I, H = 5, 3, 7, 6
    D = 2 if direction == "bidirectional" else 1
    X, W, R, B = _case(rng, T, N, I, H, D, saturate)
    if nan:
        X[2, 1, 3] = np.nan
    if layout:
        X = np.ascontiguousarray(X.transpose(1, 0, 2))
    state = (D, N, H) if layout == 0 else (N, D, H)
    h0 = rng.standard_normal(state).astype(np.float32) if states else None
    c0 = rng.standard_normal(state).astype(np.float32) if states else None
    y_shape = (T, D, N, H) if layout == 0 else (N, T, D, H)
    dY, dYh, dYc = (rng.standard_normal(s).astype(np.float32) if g else None
                    for s, g in zip((y_shape, state, state), given))
    attrs = dict(direction=direction, hidden_size=H, layout=layout)
    args = (X, W, R, B, None, h0, c0, None, dY, dYh, dYc)
    want = get_kernel("LSTMGrad", PYTRAIN_DOMAIN).numpy_fn(OpContext(), *args, **attrs)
    node = _NodeKernels(wasm_path, tmp_path)
    monkeypatch.setattr(recurrent, "kernels", node)
    monkeypatch.setattr(recurrent, "ptr", node.ptr)
    got = recurrent.lstm_grad(OpContext(), *args, **attrs)
    assert got is not None and node.calls == 1
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None or k == 6:  # (dP: no peepholes)
            continue
        assert g.shape == w.shape and g.dtype == w.dtype, k
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="output %d" % k)
        ok = ~np.isnan(w)
        if nan and k == 0:  # (dW, dR, dB: all NaN; dX: the other samples' rows finite)
            assert not ok.all() and ok.any()
        np.testing.assert_allclose(g[ok], w[ok], rtol=2e-4, atol=2e-5, err_msg="output %d" % k)


def test_lstm_grad_declines_what_the_kernel_does_not_take(monkeypatch):
    """Peepholes, clip, input_forget, padded sequences, other activations and float64 go to the numpy kernel
    (None) without calling the kernel."""

    class _Never:
        def __getattr__(self, name):
            raise AssertionError("the kernel was called")

    monkeypatch.setattr(recurrent, "kernels", _Never())
    rng = np.random.default_rng(5)
    T, N, I, H = 4, 2, 3, 5
    X, W, R, B = _case(rng, T, N, I, H, 1)
    dY = rng.standard_normal((T, 1, N, H)).astype(np.float32)
    base = dict(direction="forward", hidden_size=H)
    P = np.zeros((1, 3 * H), np.float32)
    declined = [
        ((X, W, R, B, None, None, None, P, dY), base),
        ((X, W, R, B, None, None, None, None, dY), dict(base, clip=2.0)),
        ((X, W, R, B, None, None, None, None, dY), dict(base, input_forget=1)),
        ((X, W, R, B, np.array([4, 2], np.int32), None, None, None, dY), base),
        ((X, W, R, B, None, None, None, None, dY), dict(base, activations=["Sigmoid", "Relu", "Tanh"])),
        ((X.astype(np.float64), W, R, B, None, None, None, None, dY), base),
        ((X, W, R, B, None, None, None, None, dY.astype(np.float64)), base),
    ]
    for args, attrs in declined:
        assert recurrent.lstm_grad(OpContext(), *args, **attrs) is None
