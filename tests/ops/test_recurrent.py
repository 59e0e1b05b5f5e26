"""Forward kernels of RNN, GRU and LSTM against onnxruntime (every direction, sequence_lens,
initial states, peepholes, linear_before_reset, input_forget, clip) and onnx.reference; layout=1
(which onnxruntime's CPU kernels refuse) against the same node in layout 0 on transposed tensors,
and against onnx.reference where it supports it; sequence_lens also against torch's packed sequences."""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import pytest

from ops_oracle import assert_same, run_ort, run_pytrain, run_reference
from pytrain.errors import GraphError, InputError, UnsupportedOpError

T, N, I, H = 5, 3, 4, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_OUT = {"RNN": 2, "GRU": 2, "LSTM": 3}
DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _inputs(op: str, direction: str, rng, lens=None, initial=True, peepholes=True, bias=True,
            dtype=np.float32) -> List[Optional[np.ndarray]]:
    """Time-major (layout 0) inputs in the op's schema order."""
    D, G = DIRS[direction], GATES[op]
    ins = [rng.standard_normal((T, N, I)), rng.standard_normal((D, G * H, I)) * 0.6,
           rng.standard_normal((D, G * H, H)) * 0.5, rng.standard_normal((D, 2 * G * H)) if bias else None,
           None if lens is None else np.array(lens, dtype=np.int32),
           rng.standard_normal((D, N, H)) if initial else None]
    if op == "LSTM":
        ins += [rng.standard_normal((D, N, H)) if initial else None,
                rng.standard_normal((D, 3 * H)) if peepholes else None]
    return [x if x is None or x.dtype.kind == "i" else x.astype(dtype) for x in ins]


def _close(got, ref, what, rtol=1e-5, atol=1e-5):
    assert len(got) >= len(ref), what
    for k, r in enumerate(ref):
        assert_same(got[k], r, rtol, atol, "%s output %d" % (what, k))


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("direction", sorted(DIRS))
@pytest.mark.parametrize("lens", [None, [5, 2, 3], [1, 5, 4], [0, 4, 5]])
@pytest.mark.parametrize("initial", [True, False])
def test_against_onnxruntime(op, direction, lens, initial):
    rng = np.random.default_rng(len(op) * 100 + DIRS[direction] * 10 + sum(lens or []) + initial)
    variants = [{}]
    if op == "GRU":
        variants = [{"linear_before_reset": 0}, {"linear_before_reset": 1}]
    if op == "LSTM":
        variants = [{}, {"input_forget": 1}]
    for extra in variants:
        ins = _inputs(op, direction, rng, lens, initial, peepholes=initial)
        attrs = dict(direction=direction, hidden_size=H, **extra)
        for opset in (7, 14, 22):
            _close(run_pytrain(op, ins, attrs, N_OUT[op], opset=opset), run_ort(op, ins, attrs, N_OUT[op], opset),
                   "%s %s opset %d" % (op, attrs, opset))


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("direction", sorted(DIRS))
def test_clip_against_onnxruntime(op, direction):
    rng = np.random.default_rng(7)
    ins = _inputs(op, direction, rng, lens=[4, 5, 2])
    ins[0] *= 3  # pre-activations well outside the threshold
    for extra in ([{"linear_before_reset": 0}, {"linear_before_reset": 1}] if op == "GRU" else [{}]):
        attrs = dict(direction=direction, hidden_size=H, clip=0.7, **extra)
        got = run_pytrain(op, ins, attrs, N_OUT[op], opset=14)
        _close(got, run_ort(op, ins, attrs, N_OUT[op], 14), "%s %s" % (op, attrs))
        unclipped = run_pytrain(op, ins, dict(attrs, clip=None), N_OUT[op], opset=14)
        assert not np.allclose(got[0], unclipped[0])  # the threshold mattered


@pytest.mark.parametrize("op", sorted(GATES))
def test_against_onnx_reference(op):
    rng = np.random.default_rng(3)
    for extra in ([{"linear_before_reset": 0}, {"linear_before_reset": 1}] if op == "GRU" else [{}]):
        ins = _inputs(op, "forward", rng, dtype=np.float64)
        attrs = dict(hidden_size=H, **extra)
        _close(run_pytrain(op, ins, attrs, N_OUT[op]), run_reference(op, ins, attrs, N_OUT[op]), op, 1e-10, 1e-10)


def _batch_first(op: str, ins: List[Optional[np.ndarray]]) -> List[Optional[np.ndarray]]:
    out = list(ins)
    out[0] = np.ascontiguousarray(np.swapaxes(ins[0], 0, 1))
    for k in (5, 6):  # initial_h, initial_c
        if k < len(out) and out[k] is not None:
            out[k] = np.ascontiguousarray(np.swapaxes(ins[k], 0, 1))
    return out


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("direction", sorted(DIRS))
def test_layout_1(op, direction):
    rng = np.random.default_rng(11)
    ins = _inputs(op, direction, rng, lens=[3, 5, 1])
    attrs = dict(direction=direction, hidden_size=H)
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    ref = run_ort(op, ins, attrs, N_OUT[op], 14)
    got = run_pytrain(op, _batch_first(op, ins), dict(attrs, layout=1), N_OUT[op], opset=14)
    _close(got, [np.transpose(ref[0], (2, 0, 1, 3))] + [np.swapaxes(r, 0, 1) for r in ref[1:]], op + " layout 1")
    if direction == "forward":  # onnx.reference handles layout=1 (not sequence_lens)
        ins[4] = None
        bf = _batch_first(op, ins)
        _close(run_pytrain(op, bf, dict(attrs, layout=1), N_OUT[op], opset=14),
               run_reference(op, bf, dict(attrs, layout=1), N_OUT[op], 14), op + " layout 1 vs reference")


@pytest.mark.parametrize("op", sorted(GATES))
def test_omitted_inputs_and_outputs(op):
    rng = np.random.default_rng(5)
    ins = _inputs(op, "bidirectional", rng, initial=False, peepholes=False, bias=False)
    attrs = dict(direction="bidirectional")  # hidden_size taken from R
    ref = run_ort(op, ins, dict(attrs, hidden_size=H), N_OUT[op], 14)
    full = run_pytrain(op, ins, attrs, N_OUT[op], opset=14)
    _close(full, ref, op)
    # Y not wanted: the kernel may skip it, the states are the same
    only_states = run_pytrain(op, ins, attrs, N_OUT[op], opset=14, wants=[False] + [True] * (N_OUT[op] - 1))
    for k in range(1, N_OUT[op]):
        assert_same(only_states[k], ref[k], 1e-5, 1e-5, "%s output %d" % (op, k))


@pytest.mark.parametrize("op", sorted(GATES))
def test_float64_and_float16(op):
    rng = np.random.default_rng(9)
    for dtype, tol in ((np.float64, 1e-5), (np.float16, 2e-2)):
        ins = _inputs(op, "bidirectional", rng, lens=[2, 5, 4], dtype=dtype)
        attrs = dict(direction="bidirectional", hidden_size=H)
        # onnxruntime's CPU GRU is float only: the oracle runs in float32 on the same values
        ref = [r.astype(dtype) for r in run_ort(
            op, [x if x is None or x.dtype.kind == "i" else x.astype(np.float32) for x in ins], attrs,
            N_OUT[op], 14)]
        _close(run_pytrain(op, ins, attrs, N_OUT[op], opset=14), ref, "%s %s" % (op, dtype), tol, tol)


@pytest.mark.parametrize("op", sorted(GATES))
def test_relu_and_swapped_activations(op):
    rng = np.random.default_rng(13)
    acts = {"RNN": ["Relu", "Sigmoid"], "GRU": ["Sigmoid", "Relu", "Tanh", "Sigmoid"],
            "LSTM": ["Sigmoid", "Relu", "Tanh", "Sigmoid", "Tanh", "Relu"]}[op]
    ins = _inputs(op, "bidirectional", rng, lens=[5, 1, 3])
    attrs = dict(direction="bidirectional", hidden_size=H, activations=acts)
    _close(run_pytrain(op, ins, attrs, N_OUT[op], opset=14), run_ort(op, ins, attrs, N_OUT[op], 14), op)


@pytest.mark.parametrize("op", sorted(GATES))
def test_refusals_name_the_node(op):
    rng = np.random.default_rng(1)
    ins = _inputs(op, "forward", rng)
    n_acts = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    with pytest.raises(UnsupportedOpError, match="%s node .*LeakyRelu" % op):
        run_pytrain(op, ins, dict(hidden_size=H, activations=["LeakyRelu"] * n_acts, activation_alpha=[0.1] * n_acts),
                    N_OUT[op])
    with pytest.raises(GraphError, match="activations"):
        run_pytrain(op, ins, dict(hidden_size=H, activations=["Tanh"] * (n_acts + 1)), N_OUT[op])
    with pytest.raises(GraphError, match="direction"):
        run_pytrain(op, ins, dict(hidden_size=H, direction="sideways"), N_OUT[op])
    with pytest.raises(InputError, match="W has shape"):
        run_pytrain(op, ins, dict(hidden_size=H + 1), N_OUT[op])
    with pytest.raises(InputError, match="sequence_lens"):
        bad = list(ins)
        bad[4] = np.array([1, 2, T + 1], dtype=np.int32)
        run_pytrain(op, bad, dict(hidden_size=H), N_OUT[op])
    with pytest.raises(GraphError, match="clip"):
        run_pytrain(op, ins, dict(hidden_size=H, clip=-1.0), N_OUT[op])


@pytest.mark.parametrize("op", sorted(GATES))
def test_sequence_lens_against_torch_packed(op):
    """torch's packed sequences: outputs past a sequence's length are zero, its final state is the
    state at its last valid step, and the reverse direction starts at that step."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    torch.manual_seed(0)
    layer = {"RNN": nn.RNN, "GRU": nn.GRU, "LSTM": nn.LSTM}[op](I, H, bidirectional=True).double()
    lens = [5, 2, 4]
    x = torch.randn(T, N, I, dtype=torch.float64)
    packed = pack_padded_sequence(x, torch.tensor(lens), enforce_sorted=False)
    with torch.no_grad():
        y, state = layer(packed)
    y, _ = pad_packed_sequence(y, total_length=T)  # (T, N, 2H)
    states = state if op == "LSTM" else (state,)

    # torch's gate order (i, f, g, o) / (r, z, n) reordered into ONNX's (i, o, f, c) / (z, r, h)
    order = {"RNN": [0], "GRU": [1, 0, 2], "LSTM": [0, 3, 1, 2]}[op]

    def onnx_gates(w):
        w = w.detach().numpy()
        return np.concatenate([w[k * H:(k + 1) * H] for k in order])

    sfx = ["", "_reverse"]
    W = np.stack([onnx_gates(getattr(layer, "weight_ih_l0" + s)) for s in sfx])
    R = np.stack([onnx_gates(getattr(layer, "weight_hh_l0" + s)) for s in sfx])
    B = np.stack([np.concatenate([onnx_gates(getattr(layer, "bias_ih_l0" + s)),
                                  onnx_gates(getattr(layer, "bias_hh_l0" + s))]) for s in sfx])
    attrs = dict(direction="bidirectional", hidden_size=H)
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    got = run_pytrain(op, [x.numpy(), W, R, B, np.array(lens, np.int32)], attrs, N_OUT[op])
    want_y = y.numpy().reshape(T, N, 2, H).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got[0], want_y, rtol=1e-10, atol=1e-12)
    for k, s in enumerate(states):
        np.testing.assert_allclose(got[1 + k], s.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("gain", [1.0, 40.0], ids=["moderate", "saturated"])
def test_bidirectional_lstm_gates_from_one_exp_against_onnxruntime(gain):
    """The bidirectional inference path (both directions stepped together, every gate from one exp
    with its scale folded into the weights) against onnxruntime, also where the gates saturate and
    exp overflows to inf (a gate of exactly 0, 1 or -1); float64 against onnx.reference; a NaN in
    one sample's input stays in that sample."""
    rng = np.random.default_rng(77)
    ins = _inputs("LSTM", "bidirectional", rng, initial=False, peepholes=False)
    ins[1] = ins[1] * np.float32(gain)
    ins[2] = ins[2] * np.float32(gain)
    attrs = dict(direction="bidirectional", hidden_size=H)
    _close(run_pytrain("LSTM", ins, attrs, 3), run_ort("LSTM", ins, attrs, 3, 14), "LSTM gain %g" % gain)
    ins64 = [None if x is None else x.astype(np.float64) for x in ins]
    _close(run_pytrain("LSTM", ins64, attrs, 3), run_reference("LSTM", ins64, attrs, 3), "float64", 1e-10, 1e-10)
    ins[0] = ins[0].copy()
    ins[0][2, 1, 0] = np.nan
    y, yh, yc = run_pytrain("LSTM", ins, attrs, 3)
    assert np.isnan(y[:, :, 1]).any() and not np.isnan(y[:, :, [0, 2]]).any()


@pytest.mark.parametrize("t, n, i, h, layout", [(7, 1, 5, 3, 0), (1, 2, 3, 5, 0), (6, 3, 9, 4, 1), (4, 1, 2, 7, 1)])
def test_bidirectional_lstm_one_input_projection_against_onnxruntime(t, n, i, h, layout):
    """Both directions' input projections as one product over the sequence in time order (the backward
    direction reading its rows reversed): odd sizes, batch 1, a single step, layout 1 (against onnx.reference,
    which onnxruntime refuses), inf in the input."""
    rng = np.random.default_rng(t * 100 + n * 10 + i)
    x = rng.standard_normal((t, n, i)).astype(np.float32)
    x[t // 2, n - 1, 0] = np.inf
    W = rng.standard_normal((2, 4 * h, i)).astype(np.float32) * 0.5
    R = rng.standard_normal((2, 4 * h, h)).astype(np.float32) * 0.5
    B = rng.standard_normal((2, 8 * h)).astype(np.float32) * 0.5
    if layout:
        x = np.ascontiguousarray(np.swapaxes(x, 0, 1))
    ins = [x, W, R, B]
    attrs = dict(direction="bidirectional", hidden_size=h, layout=layout)
    got = run_pytrain("LSTM", ins, attrs, 3)
    # (onnxruntime refuses layout 1: onnx.reference's LSTM then)
    ref = run_reference("LSTM", ins, attrs, 3) if layout else run_ort("LSTM", ins, attrs, 3, 14)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
    _close(got, ref, "LSTM layout %d" % layout)
