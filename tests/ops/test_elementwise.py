"""Forward kernels of the element-wise ops against onnx's ReferenceEvaluator (and math.erf)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ops_oracle import assert_same, check, run_pytrain

from pytrain.errors import GraphError, InputError
from pytrain.ops.special import erf


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


BROADCAST = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 1, 4), (3, 1)),
             ((), ())]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa,sb", BROADCAST)
def test_arith(op, sa, sb):
    a, b = rnd(*sa), rnd(*sb, seed=1)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)
    check(op, [a, b])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_arith_dtypes(op, dtype):
    rng = np.random.default_rng(2)
    a = rng.integers(-20, 20, (3, 4)).astype(dtype)
    b = rng.integers(1, 7, (4,)).astype(dtype) * np.array([1, -1, 1, -1], dtype=dtype)
    check(op, [a, b])  # integer Div truncates toward zero


@pytest.mark.parametrize("ydtype", [np.float32, np.int64, np.int32])
def test_pow(ydtype):
    x = np.abs(rnd(3, 4)) + 0.1
    y = np.array([2, 3, -1, 0], dtype=ydtype) if ydtype != np.float32 else rnd(4, seed=1)
    check("Pow", [x, y], opset=15)
    xi = np.arange(12, dtype=np.int64).reshape(3, 4)
    check("Pow", [xi, np.array([0, 1, 2, 3], dtype=np.int64)], opset=15)
    check("Pow", [rnd(2, 3), np.array(2.0, np.float32)], opset=15)


UNARY = ["Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Sign", "Floor", "Ceil", "Erf",
         "Relu", "Sigmoid", "Tanh", "Softplus"]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(3, 5), (), (2, 0, 3)])
def test_unary(op, shape):
    x = rnd(*shape) * 3
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + np.float32(0.01)
    check(op, [x])


@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign", "Relu"])
def test_unary_ints(op):
    x = np.array([[-3, 0, 5], [7, -1, 2]], dtype=np.int64)
    check(op, [x], opset=14)
    check(op, [x.astype(np.int32)], opset=14)


@pytest.mark.parametrize("op", ["Neg", "Exp", "Sigmoid", "Erf", "Sqrt"])
def test_unary_float64(op):
    check(op, [np.abs(rnd(4, 3, dtype=np.float64))])


def test_erf_against_math_erf():
    x = np.concatenate([np.linspace(-6, 6, 20001), [0.0, -0.0, 1e-30, -1e-8, 3.9999, 4.0, 4.0001]])
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), want, rtol=0, atol=3e-8)
    x32 = x.astype(np.float32)
    y32 = erf(x32)
    assert y32.dtype == np.float32
    want32 = np.array([math.erf(v) for v in x32.astype(np.float64)])
    np.testing.assert_allclose(y32, want32, rtol=0, atol=1.2e-7)
    special = erf(np.array([np.inf, -np.inf, np.nan], dtype=np.float32))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])
    assert np.signbit(erf(np.array([-0.0]))[0])


def test_sigmoid_softplus_stable():
    x = np.array([-1000, -100, -20, -1, 0, 1, 20, 100, 1000], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        s = run_pytrain("Sigmoid", [x], {})[0]
        sp = run_pytrain("Softplus", [x], {})[0]
    assert np.isfinite(s).all() and np.isfinite(sp).all()
    with np.errstate(over="ignore"):  # the float64 oracle itself overflows to 1/inf = 0
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(s, want, rtol=1e-6, atol=1e-40)
    np.testing.assert_allclose(sp[-1], 1000.0) and np.testing.assert_allclose(sp[0], 0.0, atol=1e-30)
    np.testing.assert_allclose(sp, np.logaddexp(0, x.astype(np.float64)), rtol=1e-6, atol=1e-40)


@pytest.mark.parametrize("alpha", [None, 0.2])
def test_leaky_relu(alpha):
    check("LeakyRelu", [rnd(3, 4)], {} if alpha is None else {"alpha": alpha})


@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
def test_gelu(approximate):
    x = rnd(4, 6) * 3
    attrs = {} if approximate is None else {"approximate": approximate}
    check("Gelu", [x], attrs, opset=20)
    with pytest.raises(GraphError, match="Gelu: approximate"):
        run_pytrain("Gelu", [x], {"approximate": "fast"})


def test_gelu_against_torch():
    torch = pytest.importorskip("torch")
    x = rnd(1000) * 4
    for approx in ("none", "tanh"):
        got = run_pytrain("Gelu", [x], {"approximate": approx})[0]
        ref = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approx).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_keeps_float32_on_scalars():
    # numpy 2 would promote float32 arrays with float64 scalars; the kernels must not
    x = np.array(2.0, dtype=np.float32)
    for op in ("Add", "Mul", "Div", "Sub"):
        out = run_pytrain(op, [x, x], {})[0]
        assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == ()
    for op in UNARY:
        out = run_pytrain(op, [x], {})[0]
        assert isinstance(out, np.ndarray) and out.dtype == np.float32, op


CMP = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("op", CMP)
@pytest.mark.parametrize("sa,sb", BROADCAST[:5])
def test_compare(op, sa, sb):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, sa).astype(np.float32)
    b = rng.integers(0, 3, sb).astype(np.float32)
    check(op, [a, b], opset=16)
    check(op, [a.astype(np.int64), b.astype(np.int64)], opset=16)


def test_logical():
    rng = np.random.default_rng(0)
    a = rng.random((3, 4)) > 0.5
    b = rng.random((4,)) > 0.5
    check("Not", [a])
    check("And", [a, b])
    check("Or", [a, b])
    check("Equal", [a, b])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op):
    check(op, [rnd(3, 4)])
    check(op, [rnd(3, 4), rnd(4, seed=1)])
    # onnx's reference Mean fails on broadcasting (in-place add); onnxruntime is the oracle
    check(op, [rnd(2, 1, 4), rnd(3, 1, seed=1), rnd(4, seed=2)], oracle="ort")
    if op != "Mean":
        check(op, [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([4, 0, 2], dtype=np.int64)])
    with pytest.raises(InputError):
        run_pytrain(op, [], {})


def test_where():
    rng = np.random.default_rng(0)
    cond = rng.random((3, 4)) > 0.5
    check("Where", [cond, rnd(3, 4), rnd(4, seed=1)])
    check("Where", [cond[:, :1], rnd(1, 4), rnd(3, 1, seed=1)])
    check("Where", [cond, np.arange(12, dtype=np.int64).reshape(3, 4), np.zeros((), np.int64)])
    with pytest.raises(InputError, match="Where: condition must be bool"):
        run_pytrain("Where", [cond.astype(np.int64), rnd(3, 4), rnd(3, 4)], {})


@pytest.mark.parametrize("mn,mx", [(None, None), (-0.5, None), (None, 0.5), (-0.5, 0.5), (0.5, -0.5)])
def test_clip(mn, mx):
    x = rnd(4, 5)
    ins = [x, None if mn is None else np.array(mn, np.float32), None if mx is None else np.array(mx, np.float32)]
    check("Clip", ins, opset=13)
    xi = np.arange(-5, 5, dtype=np.int64)
    check("Clip", [xi, None if mn is None else np.array(-2, np.int64),
                   None if mx is None else np.array(3, np.int64)], opset=13)


def test_clip_errors():
    with pytest.raises(InputError, match="Clip: input min must be a scalar"):
        run_pytrain("Clip", [rnd(3), rnd(2)], {})


CAST_TYPES = [(np.float32, 7), (np.float32, 6), (np.float32, 9), (np.float32, 11), (np.int64, 1),
              (np.bool_, 1), (np.float64, 1), (np.int32, 7), (np.float32, 1), (np.float32, 10),
              (np.uint8, 1)]


@pytest.mark.parametrize("src,to", CAST_TYPES)
def test_cast(src, to):
    x = (rnd(3, 4) * 10)
    x[0, :2] = 0
    x = x.astype(src) if src != np.uint8 else np.abs(x).astype(src)
    check("Cast", [x], {"to": to}, opset=13)


def test_cast_like_and_strings():
    x = rnd(3, 4) * 10
    check("CastLike", [x, np.zeros(1, np.int64)], opset=15)
    check("CastLike", [x, np.zeros((), np.float64)], opset=15)
    s = np.array(["1.5", "-2", "3e2"], dtype=object)
    got = run_pytrain("Cast", [s], {"to": 1})[0]
    assert_same(got, np.array([1.5, -2, 300], np.float32))
    with pytest.raises(InputError, match="Cast: cannot parse"):
        run_pytrain("Cast", [np.array(["x"], dtype=object)], {"to": 1})
    with pytest.raises(GraphError, match="bfloat16"):
        run_pytrain("Cast", [x], {"to": 16})
