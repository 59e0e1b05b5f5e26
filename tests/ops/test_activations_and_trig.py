"""Forward kernels of HardSwish, HardSigmoid, Elu, Selu, Celu, PRelu, Mish, Softsign, Sin, Cos and Mod
against onnx's ReferenceEvaluator and onnxruntime: every attribute, several dtypes, broadcasting,
edge values (0, +-inf, NaN, large magnitudes); and torch's layers (Hardswish with torch's
Hardsigmoid alpha=1/6 export) on the same inputs."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import check, run_pytrain
from pytrain.errors import InputError, GraphError

RNG = np.random.default_rng(20261126)
FLOATS = [np.float32, np.float64, np.float16]


def values(dtype, *shape, scale: float = 4.0) -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape) * scale).astype(dtype)


def edges(dtype) -> np.ndarray:
    """0, signed zero, the hard activations' corners, large magnitudes, infinities and NaN."""
    big = 60.0 if dtype == np.float16 else 500.0
    v = [0.0, -0.0, 3.0, -3.0, 2.5, -2.5, 1e-4, -1e-4, big, -big, np.inf, -np.inf, np.nan]
    return np.array(v, dtype=dtype)


UNARY = [
    ("HardSwish", {}, 14),
    ("HardSigmoid", {}, 6),
    ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}, 6),   # torch.nn.Hardsigmoid as exported
    ("HardSigmoid", {"alpha": 0.7, "beta": -0.2}, 6),
    ("Elu", {}, 6),
    ("Elu", {"alpha": 0.3}, 6),
    ("Selu", {}, 6),
    ("Selu", {"alpha": 2.0, "gamma": 0.5}, 6),
    ("Celu", {}, 12),
    ("Celu", {"alpha": 2.5}, 12),
    ("Mish", {}, 18),
    ("Softsign", {}, 1),
    ("Sin", {}, 7),
    ("Cos", {}, 7),
]


def _tol(dtype):
    # float64: onnx's reference rounds HardSwish's 1/6 to float32, hence not 1e-12
    return (2e-3, 2e-3) if dtype == np.float16 else ((1e-6, 1e-7) if dtype == np.float32 else (1e-6, 1e-12))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op,attrs,opset", UNARY, ids=lambda v: str(v))
def test_unary_against_reference(op, attrs, opset, dtype):
    rtol, atol = _tol(dtype)
    xs = [values(dtype, 2, 3, 4), values(dtype, 5, scale=0.5), edges(dtype)]
    if op != "Softsign":  # onnx's reference Softsign fails on a 0-d input (onnxruntime checks it below)
        xs.append(np.array(1.5, dtype=dtype))
    for x in xs:
        with np.errstate(all="ignore"):
            check(op, [x], attrs, opset=opset, oracle="ref", rtol=rtol, atol=atol)


@pytest.mark.parametrize("op,attrs,opset", UNARY, ids=lambda v: str(v))
def test_unary_against_onnxruntime(op, attrs, opset):
    dts = [np.float32] if op == "Celu" else [np.float32, np.float64]  # ORT's Celu is float32 only
    for dtype in dts:
        x = np.concatenate([values(dtype, 40), edges(dtype)])
        check(op, [x], attrs, opset=max(opset, 18), oracle="ort", rtol=1e-5, atol=1e-6)
        check(op, [np.array(-1.25, dtype)], attrs, opset=max(opset, 18), oracle="ort", rtol=1e-5, atol=1e-6)


def test_hardswish_and_hardsigmoid_match_torch():
    torch = pytest.importorskip("torch")
    x = np.concatenate([values(np.float32, 50), np.array([-3, 3, 0, -2.999, 2.999], np.float32)])
    (hs,) = run_pytrain("HardSwish", [x], {})
    np.testing.assert_allclose(hs, torch.nn.functional.hardswish(torch.tensor(x)).numpy(), rtol=1e-6, atol=1e-7)
    # torch exports nn.Hardsigmoid with alpha=1/6 (ONNX's default 0.2 would be another function)
    (hsig,) = run_pytrain("HardSigmoid", [x], {"alpha": 1.0 / 6.0, "beta": 0.5})
    np.testing.assert_allclose(hsig, torch.nn.functional.hardsigmoid(torch.tensor(x)).numpy(), rtol=1e-6, atol=1e-7)
    for op, fn in [("Elu", torch.nn.functional.elu), ("Selu", torch.nn.functional.selu),
                   ("Celu", torch.nn.functional.celu), ("Mish", torch.nn.functional.mish),
                   ("Softsign", torch.nn.functional.softsign)]:
        (y,) = run_pytrain(op, [x], {})
        np.testing.assert_allclose(y, fn(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6, err_msg=op)


# ---- PRelu: slope broadcast unidirectionally to X --------------------------------------------------
PRELU_SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4, 4), (3, 1, 1)), ((2, 3, 4), (4,)), ((3, 4), (1,)),
                ((2, 3), ()), ((5,), (5,)), ((2, 3, 4), (1, 3, 1))]


@pytest.mark.parametrize("xs,ss", PRELU_SHAPES, ids=str)
@pytest.mark.parametrize("oracle", ["ref", "ort"])
def test_prelu_broadcast(xs, ss, oracle):
    for dtype in (np.float32, np.float64):
        x, slope = values(dtype, *xs), values(dtype, *ss, scale=0.5)
        check("PRelu", [x, slope], {}, opset=16, oracle=oracle)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_prelu_other_types(dtype):
    x = (RNG.integers(-9, 9, (3, 4))).astype(dtype)
    slope = (RNG.integers(-3, 4, (4,))).astype(dtype)
    check("PRelu", [x, slope], {}, opset=16, oracle="ort")
    xf = edges(np.float32)
    check("PRelu", [xf, np.array([0.25], np.float32)], {}, opset=16, oracle="ref")


def test_prelu_refuses_a_slope_that_does_not_broadcast_to_x():
    with pytest.raises(InputError, match=r"PRelu: slope of shape \(2, 1\).*X's shape \(3,\)"):
        run_pytrain("PRelu", [values(np.float32, 3), values(np.float32, 2, 1)], {})
    with pytest.raises(InputError, match="slope"):
        run_pytrain("PRelu", [values(np.float32, 3, 4), values(np.float32, 3)], {})


# ---- Mod ------------------------------------------------------------------------------------------
def _ints(dtype, *shape):
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -50), min(info.max, 50)
    return RNG.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8], ids=lambda d: np.dtype(d).name)
def test_mod_integers(dtype, fmod):
    a = _ints(dtype, 3, 4)
    b = _ints(dtype, 4)
    b[b == 0] = 7
    for sa, sb in [(a, b), (a, b.reshape(1, 4)), (a[:, :1], b), (a[:1, :1].reshape(()), b)]:
        check("Mod", [sa, sb], {"fmod": fmod}, opset=13, oracle="ref")
        check("Mod", [sa, sb], {"fmod": fmod}, opset=13, oracle="ort")


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint32, np.uint64], ids=lambda d: np.dtype(d).name)
def test_mod_other_integer_types_against_python(dtype):
    # (types the oracles' helper does not map): Python's % and math.fmod on the same values
    import math

    a, b = _ints(dtype, 12), _ints(dtype, 12)
    b[b == 0] = 3
    (r0,) = run_pytrain("Mod", [a, b], {"fmod": 0})
    (r1,) = run_pytrain("Mod", [a, b], {"fmod": 1})
    assert r0.dtype == r1.dtype == np.dtype(dtype)
    assert r0.tolist() == [int(x) % int(y) for x, y in zip(a.tolist(), b.tolist())]
    assert r1.tolist() == [int(math.fmod(int(x), int(y))) for x, y in zip(a.tolist(), b.tolist())]


def test_mod_integer_signs():
    a = np.array([7, -7, 7, -7, 0, 6], np.int64)
    b = np.array([3, 3, -3, -3, 5, 3], np.int64)
    (r0,) = run_pytrain("Mod", [a, b], {"fmod": 0})
    (r1,) = run_pytrain("Mod", [a, b], {"fmod": 1})
    np.testing.assert_array_equal(r0, [1, 2, -2, -1, 0, 0])      # Python: a % b
    np.testing.assert_array_equal(r1, [1, -1, 1, -1, 0, 0])      # C: fmod
    assert r0.dtype == r1.dtype == np.int64


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_mod_floats(dtype):
    a, b = values(dtype, 3, 4), values(dtype, 4, scale=2.0)
    check("Mod", [a, b], {"fmod": 1}, opset=13, oracle="ort", rtol=1e-3 if dtype == np.float16 else 1e-5)
    check("Mod", [a, b[:1]], {"fmod": 1}, opset=13, oracle="ref")
    # fmod=0 on floats: the divisor's sign, as onnx's reference (and torch.remainder, Python's %)
    check("Mod", [a, b], {"fmod": 0}, opset=13, oracle="ref", rtol=1e-3 if dtype == np.float16 else 1e-5)
    e = np.array([5.5, -5.5, 5.5, -5.5, 0.0, np.inf, 1.0, np.nan], dtype)
    d = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 2.0, np.inf, 1.0], dtype)
    (r0,) = run_pytrain("Mod", [e, d], {"fmod": 0})
    (r1,) = run_pytrain("Mod", [e, d], {"fmod": 1})
    np.testing.assert_array_equal(r1[:5], np.array([1.5, -1.5, 1.5, -1.5, 0.0], dtype))
    np.testing.assert_array_equal(r0[:5], np.array([1.5, 0.5, -0.5, -1.5, 0.0], dtype))
    assert np.isnan(r0[5]) and np.isnan(r1[5]) and np.isnan(r0[7]) and r1[6] == 1.0


def test_mod_matches_torch():
    torch = pytest.importorskip("torch")
    a, b = values(np.float32, 20), values(np.float32, 20, scale=2.0)
    (r0,) = run_pytrain("Mod", [a, b], {"fmod": 0})
    (r1,) = run_pytrain("Mod", [a, b], {"fmod": 1})
    np.testing.assert_allclose(r0, torch.remainder(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r1, torch.fmod(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-6, atol=1e-6)


def test_mod_errors():
    a = values(np.float32, 3)
    with pytest.raises(GraphError, match="fmod must be 0 or 1"):
        run_pytrain("Mod", [a, a], {"fmod": 2})
    with pytest.raises(InputError, match="one type"):
        run_pytrain("Mod", [a, a.astype(np.float64)], {"fmod": 1})


def test_integer_mod_by_zero_is_zero():
    (r,) = run_pytrain("Mod", [np.array([5, -5], np.int32), np.array([0, 0], np.int32)], {"fmod": 0})
    np.testing.assert_array_equal(r, [0, 0])
