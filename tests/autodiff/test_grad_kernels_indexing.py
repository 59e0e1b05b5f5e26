"""Gradient kernels of the indexing, scattering and padding ops (GatherElementsGrad,
ScatterElementsGrad, ScatterNDGrad, PadGrad, TileGrad) against float64 finite differences of the
forward kernels, torch in float32, and the same kernels on Python 3.8 + numpy 1.17."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gradcheck import numeric_grad, run_kernel
from ops_oracle import run_pytrain

ROOT = Path(__file__).resolve().parents[2]
I64 = np.int64


def rng(seed):
    return np.random.default_rng(seed)


def forward(op, inputs, attrs, opset=19):
    return run_pytrain(op, inputs, attrs, opset=opset)[0]


def fd_check(op, grad_op, inputs, wrt, attrs, grad_inputs, seed=0):
    """The gradient kernel's outputs (one per position in ``wrt``) equal central differences of
    sum(R * op(inputs)) in float64; ``grad_inputs(dY)`` builds the gradient kernel's inputs."""
    y = forward(op, inputs, attrs)
    dy = rng(seed).standard_normal(y.shape)
    got = run_kernel(grad_op, *grad_inputs(dy), **{k: v for k, v in attrs.items() if k != "opset"})
    absent = [x is None for x in inputs]  # numeric_grad copies its inputs: keep the omitted ones None
    for out, i in zip(got, wrt):
        def f(*xs):
            return float(np.sum(dy * forward(op, [None if a else x for a, x in zip(absent, xs)], attrs)))
        want = numeric_grad(f, [np.zeros(0) if a else x for a, x in zip(absent, inputs)], i)
        assert out.shape == inputs[i].shape and out.dtype == np.float64
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-8, err_msg="%s input %d" % (op, i))
    return got


# ---- GatherNDGrad -----------------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape,idx,batch_dims", [
    ((3, 4), [[0, 1], [2, -1], [0, 1]], 0),           # elements, a repeat accumulates, a negative index
    ((3, 4, 2), [[1], [-1], [1]], 0),                 # slices
    ((2, 3, 4), [[[1, 0]], [[2, 3]]], 1),             # batch_dims 1: one (row, column) per batch
    ((2, 3, 2, 2), [[[1], [0]], [[2], [2]]], 1),
])
def test_gather_nd_grad(x_shape, idx, batch_dims):
    x = rng(2).standard_normal(x_shape)
    i = np.asarray(idx, dtype=I64)
    fd_check("GatherND", "GatherNDGrad", [x, i], [0], {"batch_dims": batch_dims}, lambda dy: (dy, i, x))


# ---- GatherElementsGrad ---------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape,idx,axis", [
    ((3, 4), [[0, -1, 2, 0], [0, 0, -3, 1]], 0),                  # repeats and negative indices accumulate
    ((3, 4), [[3, 3, 0, 1, -1], [1, 2, 2, 2, 0]], 1),             # narrower off the axis, longer along it
    ((2, 3, 2), [[[2, 0], [1, 1]], [[0, 0], [-1, 2]]], -2),
    ((4,), [1, 1, 1, -1, 0], 0),
    ((2, 3), np.zeros((0, 3), I64), 0),
])
def test_gather_elements_grad(x_shape, idx, axis):
    x = rng(1).standard_normal(x_shape)
    i = np.asarray(idx, dtype=I64)
    fd_check("GatherElements", "GatherElementsGrad", [x, i], [0], {"axis": axis},
             lambda dy: (dy, i, x))


def test_gather_elements_grad_float32_matches_torch():
    torch = pytest.importorskip("torch")
    x = rng(2).standard_normal((5, 6)).astype(np.float32)
    idx = rng(3).integers(0, 6, (5, 9))
    dy = rng(4).standard_normal((5, 9)).astype(np.float32)
    (dx,) = run_kernel("GatherElementsGrad", dy, idx, x, axis=1)
    t = torch.tensor(x, requires_grad=True)
    torch.gather(t, 1, torch.tensor(idx)).backward(torch.tensor(dy))
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-6, atol=1e-6)


# ---- ScatterElementsGrad / ScatterNDGrad ------------------------------------------------------------
def _with_zeros(x, where):
    x = x.copy()
    for w in where:
        x[w] = 0.0
    return x


ELEMENT_CASES = {  # name: (data shape, indices, axis)
    "repeated axis 0": ((3, 4), [[1, 1, 2, 0], [1, 0, -1, 0], [1, 2, 2, 0]], 0),
    "axis 1 narrower": ((3, 5), [[4, 4, 0], [-1, 1, 1]], 1),
    "3-D": ((2, 2, 3), [[[0, 1, 1], [1, 1, 0]], [[1, 0, 0], [0, 0, -1]]], 2),
}


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("case", sorted(ELEMENT_CASES))
def test_scatter_elements_grad(case, reduction):
    shape, idx, axis = ELEMENT_CASES[case]
    i = np.asarray(idx, dtype=I64)
    data, upd = rng(5).standard_normal(shape), rng(6).standard_normal(i.shape)
    attrs = {"axis": axis, "reduction": reduction}
    values = reduction in ("mul", "max", "min")
    fd_check("ScatterElements", "ScatterElementsGrad", [data, i, upd], [0, 2], attrs,
             lambda dy: (dy, i) + ((data, upd, forward("ScatterElements", [data, i, upd], attrs)) if values else ()))


ND_CASES = {  # name: (data shape, indices)
    "rows repeated": ((4, 3), [[1], [3], [1], [-3]]),
    "elements repeated": ((3, 3), [[0, 0], [2, 1], [0, 0], [-3, 0]]),
    "slices batched": ((3, 2, 2), [[[1], [1]], [[0], [-1]]]),
}


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("case", sorted(ND_CASES))
def test_scatter_nd_grad(case, reduction):
    shape, idx = ND_CASES[case]
    i = np.asarray(idx, dtype=I64)
    data = rng(7).standard_normal(shape)
    upd = rng(8).standard_normal(i.shape[:-1] + shape[i.shape[-1]:])
    attrs = {"reduction": reduction}
    values = reduction in ("mul", "max", "min")
    fd_check("ScatterND", "ScatterNDGrad", [data, i, upd], [0, 2], attrs,
             lambda dy: (dy, i) + ((data, upd, forward("ScatterND", [data, i, upd], attrs)) if values else ()))


@pytest.mark.parametrize("zeros", [
    ([(1, 1)], []),                  # a zero in data: its position's updates get 0, data gets the product
    ([], [(0, 3)]),                  # one zero among three updates at one position
    ([], [(0, 3), (1, 3)]),          # two zeros at one position: every factor's gradient is 0
    ([(2, 2)], [(1, 2)]),            # a zero in data and one in an update at the same position
])
def test_scatter_elements_grad_mul_with_zeros(zeros):
    i = np.array([[1, 1, 2, 0], [1, 0, -1, 0], [1, 2, 2, 0]], dtype=I64)
    data = _with_zeros(rng(9).standard_normal((3, 4)), zeros[0])
    upd = _with_zeros(rng(10).standard_normal((3, 4)), zeros[1])
    attrs = {"axis": 0, "reduction": "mul"}
    fd_check("ScatterElements", "ScatterElementsGrad", [data, i, upd], [0, 2], attrs,
             lambda dy: (dy, i, data, upd, forward("ScatterElements", [data, i, upd], attrs)))


def test_scatter_grad_ties_share_evenly_and_wants():
    # max: data and two updates tie at position (0, 0): each gets a third (torch's amax semantics)
    data = np.array([[2.0, 1.0]])
    i = np.array([[0, 0, 0]], dtype=I64)
    upd = np.array([[2.0, -1.0, 2.0]])
    y = forward("ScatterElements", [data, i, upd], {"axis": 1, "reduction": "max"})
    dy = np.array([[3.0, 5.0]])
    d_data, d_upd = run_kernel("ScatterElementsGrad", dy, i, data, upd, y, axis=1, reduction="max")
    np.testing.assert_array_equal(d_data, [[1.0, 5.0]])
    np.testing.assert_array_equal(d_upd, [[1.0, 0.0, 1.0]])
    # only the wanted output is computed
    d_data, d_upd = run_kernel("ScatterElementsGrad", dy, i, axis=1, reduction="add", wants=[False, True])
    assert d_data is None
    np.testing.assert_array_equal(d_upd, [[3.0, 3.0, 3.0]])


def test_scatter_grad_needs_values_for_mul():
    from pytrain.errors import KernelError

    with pytest.raises(KernelError, match="reduction 'mul' needs data, updates and the forward output"):
        run_kernel("ScatterNDGrad", np.ones((2, 2)), np.array([[0]], dtype=I64), reduction="mul")


# ---- PadGrad ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [
    ((1, 2, 2, 1), None),
    ((-1, 2, 2, -2), None),
    ((2, -1, 0, 2), (-1, 0)),
    ((0, 3, 0, 0, 0, 4), (0, 1, 2)),
    ((3, 0, 0, 7), (2, 1)),          # wrap/reflect/edge around more than once where numpy allows it
])
def test_pad_grad(mode, pads, axes):
    if mode == "reflect" and pads == (3, 0, 0, 7):
        pads = (3, 0, 0, 4)
    x = rng(11).standard_normal((4, 5, 6))
    p = np.array(pads if axes is not None else pads[:2] + (0,) + pads[2:] + (0,), dtype=I64)
    a = None if axes is None else np.array(axes, dtype=I64)
    inputs = [x, p, None, a]
    fd_check("Pad", "PadGrad", inputs, [0], {"mode": mode}, lambda dy: (dy, x, p, a))


def test_pad_grad_constant_is_pad_with_negated_pads():
    x = rng(12).standard_normal((3, 4)).astype(np.float32)
    p = np.array([-1, 2, 1, -2], dtype=I64)
    y = forward("Pad", [x, p], {"mode": "constant"})
    dy = rng(13).standard_normal(y.shape).astype(np.float32)
    (dx,) = run_kernel("PadGrad", dy, x, p, mode="constant")
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, forward("Pad", [dy, -p], {"mode": "constant"}))


# ---- TileGrad -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,reps", [((2, 3), (3, 2)), ((2, 1, 3), (1, 4, 1)), ((3,), (2,)), ((2, 2), (0, 3)),
                                        ((), ())])
def test_tile_grad(shape, reps):
    x = rng(14).standard_normal(shape)
    r = np.array(reps, dtype=I64)
    fd_check("Tile", "TileGrad", [x, r], [0], {}, lambda dy: (dy, x, r))


# ---- the same kernels on the browser's Python 3.8 + numpy 1.17 -----------------------------------
PY38_SCRIPT = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.ops import OpContext, get_kernel, PYTRAIN_DOMAIN
d = np.load(sys.argv[2])
def run(op, *xs, domain="", **attrs):
    return get_kernel(op, domain).fn(OpContext(opset=19, output_mask=(True, True)), *xs, **attrs)
x, i, u, dy = d["x"], d["i"], d["u"], d["dy"]
nd_i = d["nd_i"]
out = {}
out["ge"] = run("GatherElements", x, i, axis=1)[0]
out["ge_grad"] = run("GatherElementsGrad", out["ge"] * 0 + 1, i, x, domain=PYTRAIN_DOMAIN, axis=1)[0]
for red in ("none", "add", "mul", "max", "min"):
    y = run("ScatterElements", x, i, u, axis=1, reduction=red)[0]
    out["se_" + red] = y
    out["se_grad_data_" + red], out["se_grad_upd_" + red] = run(
        "ScatterElementsGrad", dy, i, x, u, y, domain=PYTRAIN_DOMAIN, axis=1, reduction=red)
    y = run("ScatterND", x, nd_i, x[:2], reduction=red)[0]
    out["nd_" + red] = y
    out["nd_grad_data_" + red], out["nd_grad_upd_" + red] = run(
        "ScatterNDGrad", dy, nd_i, x, x[:2], y, domain=PYTRAIN_DOMAIN, reduction=red)
out["trilu"] = run("Trilu", x, np.array(-1, np.int64), upper=0)[0]
for mode in ("constant", "reflect", "edge", "wrap"):
    p = np.array([1, -1, 2, 3], np.int64)
    y = run("Pad", x, p, None, None, mode=mode)[0]
    out["pad_grad_" + mode] = run("PadGrad", y * 0 + 1, x, p, domain=PYTRAIN_DOMAIN, mode=mode)[0]
out["tile_grad"] = run("TileGrad", np.ones((6, 15), np.float32), x, np.array([2, 3], np.int64),
                       domain=PYTRAIN_DOMAIN)[0]
np.savez(sys.argv[3], version=np.__version__, **out)
"""


def test_kernels_on_python38_numpy117(tmp_path):
    py = ROOT / "build" / "py38-numpy117" / "bin" / "python"
    if not py.exists():
        pytest.skip("the Python 3.8 + numpy 1.17 venv is built by tests/api/test_python38_numpy117.py")
    r = rng(15)
    feed = {"x": r.standard_normal((3, 5)).astype(np.float32), "i": np.array([[4, 4, 0], [-1, 1, 1], [2, 2, 2]]),
            "u": r.standard_normal((3, 3)).astype(np.float32), "dy": r.standard_normal((3, 5)).astype(np.float32),
            "nd_i": np.array([[2], [2]])}
    np.savez(tmp_path / "in.npz", **feed)
    script = tmp_path / "run.py"
    script.write_text(PY38_SCRIPT)
    subprocess.run([str(py), str(script), str(ROOT), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                   check=True, env=dict(os.environ, PYTHONPATH=""))
    old = np.load(tmp_path / "out.npz")
    assert str(old["version"]) == "1.17.5"
    script_globals = {"__name__": "here"}
    import sys
    argv = sys.argv
    try:  # the same script here, on this numpy
        sys.argv = ["run.py", str(ROOT), str(tmp_path / "in.npz"), str(tmp_path / "here.npz")]
        exec(compile(PY38_SCRIPT, "run.py", "exec"), script_globals)
    finally:
        sys.argv = argv
    new = np.load(tmp_path / "here.npz")
    for k in new.files:
        if k != "version":
            assert old[k].dtype == new[k].dtype, k
            np.testing.assert_allclose(old[k], new[k], rtol=1e-6, atol=1e-6, err_msg=k)
