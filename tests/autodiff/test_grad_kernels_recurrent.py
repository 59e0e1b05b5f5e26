"""RNNGrad, GRUGrad, LSTMGrad (backpropagation through time) against float64 central finite
differences of the forward kernels, for every differentiable input (X, W, R, B, initial_h,
initial_c, P), every direction, both layouts, sequence_lens, clip, linear_before_reset and
input_forget, with any of dY, dY_h, dY_c absent."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from gradcheck import numeric_grad, run_kernel
from ops_oracle import run_pytrain

T, N, I, H = 4, 3, 2, 3
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_OUT = {"RNN": 2, "GRU": 2, "LSTM": 3}
DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}
EXTRAS = {"RNN": [{}, {"clip": 0.8}, {"activations": None}],
          "GRU": [{"linear_before_reset": 0}, {"linear_before_reset": 1}, {"linear_before_reset": 0, "clip": 0.8}],
          "LSTM": [{}, {"input_forget": 1}, {"clip": 0.8}]}


def _inputs(op, D, layout, lens, rng):
    G = GATES[op]
    ins = [rng.standard_normal((T, N, I) if layout == 0 else (N, T, I)), rng.standard_normal((D, G * H, I)),
           rng.standard_normal((D, G * H, H)) * 0.5, rng.standard_normal((D, 2 * G * H)),
           None if lens is None else np.array(lens, dtype=np.int32),
           rng.standard_normal((D, N, H) if layout == 0 else (N, D, H))]
    if op == "LSTM":
        ins += [rng.standard_normal(ins[5].shape), rng.standard_normal((D, 3 * H))]
    return ins


def _check(op, ins, attrs, seeds, present):
    """Every input's gradient of sum_k <out_k, seed_k> over the present outputs, vs finite differences."""
    positions = [i for i in range(len(ins)) if i != 4 and ins[i] is not None]
    grad_positions = [i for i in range(len(ins)) if i != 4]

    def f(*xs):
        a = list(ins)
        for p, x in zip(positions, xs):
            a[p] = x
        outs = run_pytrain(op, a, attrs, N_OUT[op])
        return sum(float(np.sum(o * s)) for o, s, keep in zip(outs, seeds, present) if keep)

    dys = [s if keep else None for s, keep in zip(seeds, present)]
    got = run_kernel(op + "Grad", *(list(ins) + dys), **attrs)
    assert len(got) == len(grad_positions)
    for k, p in enumerate(positions):
        want = numeric_grad(f, [ins[q] for q in positions], k)
        g = got[grad_positions.index(p)]
        assert g.shape == ins[p].shape and g.dtype == np.float64, (op, p, g.shape)
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8, err_msg="%s %s input %d" % (op, attrs, p))


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("direction", sorted(DIRS))
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("lens", [None, [4, 2, 1], [3, 0, 4]])
def test_bptt_matches_finite_differences(op, direction, layout, lens):
    rng = np.random.default_rng(sum(map(ord, op + direction)) + 7 * layout + sum(lens or []))
    for extra in EXTRAS[op]:
        attrs = dict(direction=direction, hidden_size=H, layout=layout, **extra)
        if extra.get("activations", 0) is None:  # Sigmoid instead of Tanh, per direction
            attrs["activations"] = ["Sigmoid"] * DIRS[direction]
        ins = _inputs(op, DIRS[direction], layout, lens, rng)
        seeds = [rng.standard_normal(o.shape) for o in run_pytrain(op, ins, attrs, N_OUT[op])]
        _check(op, ins, attrs, seeds, [True] * N_OUT[op])


@pytest.mark.parametrize("op", sorted(GATES))
def test_absent_output_gradients_and_optional_inputs(op):
    rng = np.random.default_rng(21)
    attrs = dict(direction="bidirectional", hidden_size=H, linear_before_reset=1) if op == "GRU" else \
        dict(direction="bidirectional", hidden_size=H)
    ins = _inputs(op, 2, 0, [2, 4, 3], rng)
    seeds = [rng.standard_normal(o.shape) for o in run_pytrain(op, ins, attrs, N_OUT[op])]
    for present in itertools.product([False, True], repeat=N_OUT[op]):
        if any(present):
            _check(op, ins, attrs, seeds, list(present))
    # no bias, no initial states, no peepholes: their gradients are not asked for
    bare = list(ins)
    for k in (3, 5, 6, 7):
        if k < len(bare):
            bare[k] = None
    _check(op, bare, attrs, seeds, [True] * N_OUT[op])


@pytest.mark.parametrize("op", sorted(GATES))
def test_skipped_outputs_are_not_computed(op):
    rng = np.random.default_rng(4)
    ins = _inputs(op, 1, 0, None, rng)
    attrs = dict(hidden_size=H)
    seeds = [rng.standard_normal(o.shape) for o in run_pytrain(op, ins, attrs, N_OUT[op])]
    n_grads = 7 if op == "LSTM" else 5
    full = run_kernel(op + "Grad", *(ins + seeds), **attrs)
    only_w = run_kernel(op + "Grad", *(ins + seeds), wants=[False, True] + [False] * (n_grads - 2), **attrs)
    np.testing.assert_array_equal(only_w[1], full[1])
    assert only_w[0] is None and only_w[3] is None and only_w[4] is None


_PY38_SCRIPT = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.ops import OpContext, get_kernel
d = np.load(sys.argv[2], allow_pickle=False)
out = {}
for op in ("RNN", "GRU", "LSTM"):
    ins = [d[op + "_in%d" % k] if op + "_in%d" % k in d.files else None for k in range(8 if op == "LSTM" else 6)]
    attrs = dict(direction="bidirectional", hidden_size=3, layout=1, clip=2.0)
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    ctx = OpContext(output_mask=(True,) * 8)
    outs = get_kernel(op).fn(ctx, *ins, **attrs)
    grads = get_kernel(op + "Grad", "ai.pytrain").fn(ctx, *(ins + [np.ones_like(o) for o in outs]), **attrs)
    for k, v in enumerate(list(outs) + list(grads)):
        out["%s_%d" % (op, k)] = v
np.savez(sys.argv[3], numpy_version=np.__version__, **out)
"""


def test_same_results_on_python38_numpy117(tmp_path):
    """The browser's Python (3.8, numpy 1.17.5): forward and BPTT give this interpreter's numbers.
    Uses the venv tests/api/test_python38_numpy117.py builds (skipped until it exists)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    py = root / "build" / "py38-numpy117" / "bin" / "python"
    if not py.exists():
        pytest.skip("no build/py38-numpy117 venv (tests/api/test_python38_numpy117.py builds it)")
    rng = np.random.default_rng(30)
    feeds, want = {}, {}
    for op in ("RNN", "GRU", "LSTM"):
        ins = [None if x is None else (x if x.dtype.kind == "i" else x.astype(np.float32))
               for x in _inputs(op, 2, 1, [4, 0, 2], rng)]
        for k, x in enumerate(ins):
            if x is not None:
                feeds[op + "_in%d" % k] = x
        attrs = dict(direction="bidirectional", hidden_size=H, layout=1, clip=2.0)
        if op == "GRU":
            attrs["linear_before_reset"] = 1
        outs = run_pytrain(op, ins, attrs, N_OUT[op])
        grads = run_kernel(op + "Grad", *(ins + [np.ones_like(o) for o in outs]), **attrs)
        for k, v in enumerate(list(outs) + list(grads)):
            want["%s_%d" % (op, k)] = v
    np.savez(tmp_path / "in.npz", **feeds)
    subprocess.run([str(py), "-c", _PY38_SCRIPT, str(root), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                   check=True, timeout=300)
    got = np.load(tmp_path / "out.npz")
    assert str(got["numpy_version"]) == "1.17.5"
    for k, v in want.items():
        assert got[k].dtype == v.dtype == np.float32, k
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
