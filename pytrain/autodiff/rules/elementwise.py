"""Gradient rules of the ops in ``pytrain/ops/elementwise``: arithmetic, activations, casts, Where,
Max/Min. See :mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

import math
from typing import Callable, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


# ---- element-wise arithmetic --------------------------------------------------------------
def _second(b: B, n: N) -> Tuple[str, Callable[[str], str]]:
    """Input 1 as the formulas read it, and how a gradient shaped like that goes back to its shape.
    Opset 1-6's ``broadcast=1, axis=k`` matches B to A's dims from k on (pytrain/ops/elementwise/
    legacy_broadcast.py): B then reads as B reshaped with A's trailing dims as 1s, numpy's broadcast."""
    x1 = n.x(1)
    if not int(n.attr("broadcast", 0) or 0) or n.attr("axis") is None:
        return x1, lambda g: g
    i64 = lambda v: b.const(v, np.int64)  # noqa: E731
    shape_a, shape_b = b.op("Shape", n.x(0)), b.op("Shape", x1)
    start = b.op("Add", i64([int(n.attr("axis"))]), b.op("Reshape", b.op("Size", shape_b), i64([1])))
    if int(n.attr("axis")) < 0:
        start = b.op("Add", start, b.op("Reshape", b.op("Size", shape_a), i64([1])))
    tail = b.op("Slice", shape_a, start, i64([np.iinfo(np.int64).max]))
    ones = b.op("Add", b.op("Mul", tail, i64(0)), i64(1))
    aligned = b.op("Reshape", x1, b.op("Concat", shape_b, ones, axis=0))
    return aligned, lambda g: b.op("Reshape", g, shape_b)


@gradient("Add")
def _add(b: B, n: N, dy: G) -> G:
    x1, back = _second(b, n)
    return [b.unbroadcast(dy[0], n.x(0)) if n.needs(0) else None,
            back(b.unbroadcast(dy[0], x1)) if n.needs(1) else None]


@gradient("Sub")
def _sub(b: B, n: N, dy: G) -> G:
    x1, back = _second(b, n)
    return [b.unbroadcast(dy[0], n.x(0)) if n.needs(0) else None,
            back(b.unbroadcast(b.op("Neg", dy[0]), x1)) if n.needs(1) else None]


@gradient("Mul")
def _mul(b: B, n: N, dy: G) -> G:
    x1, back = _second(b, n)
    return [b.unbroadcast(b.op("Mul", dy[0], x1), n.x(0)) if n.needs(0) else None,
            back(b.unbroadcast(b.op("Mul", dy[0], n.x(0)), x1)) if n.needs(1) else None]


@gradient("Div")
def _div(b: B, n: N, dy: G) -> G:
    # d(a/c)/da = 1/c ; d(a/c)/dc = -a/c^2 = -y/c
    x1, back = _second(b, n)
    return [b.unbroadcast(b.op("Div", dy[0], x1), n.x(0)) if n.needs(0) else None,
            back(b.unbroadcast(b.op("Neg", b.op("Div", b.op("Mul", dy[0], n.y()), x1)), x1))
            if n.needs(1) else None]


@gradient("Pow")
def _pow(b: B, n: N, dy: G) -> G:
    a = n.x(0)
    p, back = _second(b, n)
    da = dp = None
    if n.needs(0):  # p * a^(p-1)
        pf = b.op("CastLike", p, a)
        da = b.unbroadcast(b.op("Mul", dy[0], b.op("Mul", pf, b.op("Pow", a, b.op("Sub", pf, b.scalar(1.0, a))))), a)
    if n.needs(1):  # a^p * ln a, in p's type (Pow allows a float exponent of another type)
        dp = b.op("CastLike", back(b.unbroadcast(b.op("Mul", dy[0], b.op("Mul", n.y(), b.op("Log", a))), p)), n.x(1))
    return [da, dp]


@gradient("Neg")
def _neg(b: B, n: N, dy: G) -> G:
    return [b.op("Neg", dy[0])]


@gradient("Abs")
def _abs(b: B, n: N, dy: G) -> G:
    return [b.op("Mul", dy[0], b.op("Sign", n.x(0)))]


@gradient("Sqrt")
def _sqrt(b: B, n: N, dy: G) -> G:
    return [b.op("Div", b.op("Mul", dy[0], b.scalar(0.5, n.x(0))), n.y())]


@gradient("Exp")
def _exp(b: B, n: N, dy: G) -> G:
    return [b.op("Mul", dy[0], n.y())]


@gradient("Log")
def _log(b: B, n: N, dy: G) -> G:
    return [b.op("Div", dy[0], n.x(0))]


@gradient("Reciprocal")
def _reciprocal(b: B, n: N, dy: G) -> G:
    return [b.op("Neg", b.op("Mul", dy[0], b.op("Mul", n.y(), n.y())))]


@gradient("Erf")
def _erf(b: B, n: N, dy: G) -> G:
    x = n.x(0)
    bell = b.op("Exp", b.op("Neg", b.op("Mul", x, x)))
    return [b.op("Mul", dy[0], b.op("Mul", bell, b.scalar(2.0 / math.sqrt(math.pi), x)))]


@gradient("Sum")
def _sum(b: B, n: N, dy: G) -> G:
    return [b.unbroadcast(dy[0], n.x(i)) if n.needs(i) else None for i in range(n.n_inputs)]


@gradient("Mean")
def _mean(b: B, n: N, dy: G) -> G:
    g = b.op("Div", dy[0], b.scalar(float(n.n_inputs), dy[0]))
    return [b.unbroadcast(g, n.x(i)) if n.needs(i) else None for i in range(n.n_inputs)]


# ---- activations ----------------------------------------------------------------------------
@gradient("Relu")
def _relu(b: B, n: N, dy: G) -> G:
    return [b.pt("ReluGrad", dy[0], n.y())]


@gradient("LeakyRelu")
def _leaky_relu(b: B, n: N, dy: G) -> G:
    return [b.pt("LeakyReluGrad", dy[0], n.x(0), alpha=float(n.attr("alpha", 0.01)))]


@gradient("Sigmoid")
def _sigmoid(b: B, n: N, dy: G) -> G:
    y = n.y()
    return [b.op("Mul", dy[0], b.op("Mul", y, b.op("Sub", b.scalar(1.0, y), y)))]


@gradient("Tanh")
def _tanh(b: B, n: N, dy: G) -> G:
    y = n.y()
    return [b.op("Mul", dy[0], b.op("Sub", b.scalar(1.0, y), b.op("Mul", y, y)))]


@gradient("Softplus")
def _softplus(b: B, n: N, dy: G) -> G:
    return [b.op("Mul", dy[0], b.op("Sigmoid", n.x(0)))]


@gradient("Gelu")
def _gelu(b: B, n: N, dy: G) -> G:
    return [b.pt("GeluGrad", dy[0], n.x(0), approximate=n.attr("approximate", "none"))]


gradient("Gelu", domain="ai.pytrain")(_gelu)   # the training model's fused tanh-GELU (pytrain.autodiff.gelu_forms)


@gradient("Clip")
def _clip(b: B, n: N, dy: G) -> G:
    # dy flows to X inside [min, max] and to the bound X was clipped to outside it (torch.clamp)
    x, lo, hi = n.x(0), n.x(1), n.x(2)
    zero = b.scalar(0.0, dy[0])
    # Clip-6 holds its bounds in attributes
    lo = lo if lo is not None or n.attr("min") is None else b.scalar(float(n.attr("min")), x)
    hi = hi if hi is not None or n.attr("max") is None else b.scalar(float(n.attr("max")), x)
    return [b.pt("ClipGrad", dy[0], x, lo, hi) if n.needs(0) else None,
            b.unbroadcast(b.op("Where", b.op("Less", x, lo), dy[0], zero), lo) if n.needs(1) else None,
            b.unbroadcast(b.op("Where", b.op("Greater", x, hi), dy[0], zero), hi) if n.needs(2) else None]


@gradient("Cast", when=lambda n: dtypes.is_float(int(n.attr("to", 0))))
def _cast(b: B, n: N, dy: G) -> G:
    return [b.op("CastLike", dy[0], n.x(0))]


@gradient("CastLike", inputs=(0,))
def _cast_like(b: B, n: N, dy: G) -> G:
    return [b.op("CastLike", dy[0], n.x(0)), None]


@gradient("Where", inputs=(1, 2))
def _where(b: B, n: N, dy: G) -> G:
    c = n.x(0)
    zero = b.scalar(0.0, dy[0])
    return [None,
            b.unbroadcast(b.op("Where", c, dy[0], zero), n.x(1)) if n.needs(1) else None,
            b.unbroadcast(b.op("Where", c, zero, dy[0]), n.x(2)) if n.needs(2) else None]


# ---- more activations and element-wise math (HardSwish, Elu, PRelu, Sin, Mod, Max/Min, ...) ---
@gradient("HardSigmoid")
def _hard_sigmoid(b: B, n: N, dy: G) -> G:
    return [b.pt("HardSigmoidGrad", dy[0], n.x(0), alpha=float(n.attr("alpha", 0.2)),
                 beta=float(n.attr("beta", 0.5)))]


@gradient("HardSwish")
def _hard_swish(b: B, n: N, dy: G) -> G:
    # y = x h(x), h = HardSigmoid(1/6, 1/2): dy/dx = h + x/6 on -3 < x < 3, else h (0 below, 1 above)
    return [b.pt("HardSwishGrad", dy[0], n.x(0))]


@gradient("Elu")
def _elu(b: B, n: N, dy: G) -> G:
    # 1 for x > 0; alpha e^x = y + alpha below (torch's elu_backward from the result)
    x, y = n.x(0), n.y()
    below = b.op("Mul", dy[0], b.op("Add", y, b.scalar(float(n.attr("alpha", 1.0)), y)))
    return [b.op("Where", b.op("Greater", x, b.scalar(0.0, x)), dy[0], below)]


@gradient("Selu")
def _selu(b: B, n: N, dy: G) -> G:
    # gamma for x > 0; gamma alpha e^x = y + gamma alpha below
    from pytrain.ops.elementwise.op_exponential_units import SELU_ALPHA, SELU_GAMMA

    x, y = n.x(0), n.y()
    alpha, gamma = float(n.attr("alpha", SELU_ALPHA)), float(n.attr("gamma", SELU_GAMMA))
    above = b.op("Mul", dy[0], b.scalar(gamma, x))
    below = b.op("Mul", dy[0], b.op("Add", y, b.scalar(alpha * gamma, y)))
    return [b.op("Where", b.op("Greater", x, b.scalar(0.0, x)), above, below)]


@gradient("Celu")
def _celu(b: B, n: N, dy: G) -> G:
    # 1 for x > 0; e^(x / alpha) below
    x = n.x(0)
    below = b.op("Mul", dy[0], b.op("Exp", b.op("Div", x, b.scalar(float(n.attr("alpha", 1.0)), x))))
    return [b.op("Where", b.op("Greater", x, b.scalar(0.0, x)), dy[0], below)]


@gradient("PRelu")
def _prelu(b: B, n: N, dy: G) -> G:
    # as torch's prelu: dx = dy where x > 0 else slope dy; dslope = x dy where x <= 0, summed back to
    # slope's shape (slope broadcasts to X, so dy has X's shape)
    x, slope = n.x(0), n.x(1)
    pos = b.op("Greater", x, b.scalar(0.0, x))
    dx = b.op("Where", pos, dy[0], b.op("Mul", dy[0], slope)) if n.needs(0) else None
    dslope = b.unbroadcast(b.op("Where", pos, b.zeros_like(dy[0]), b.op("Mul", dy[0], x)), slope) \
        if n.needs(1) else None
    return [dx, dslope]


@gradient("Mish")
def _mish(b: B, n: N, dy: G) -> G:
    # d/dx x tanh(sp(x)) = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))
    x = n.x(0)
    t = b.op("Tanh", b.op("Softplus", x))
    sech2 = b.op("Sub", b.scalar(1.0, x), b.op("Mul", t, t))
    return [b.op("Mul", dy[0], b.op("Add", t, b.op("Mul", b.op("Mul", x, b.op("Sigmoid", x)), sech2)))]


@gradient("Softsign")
def _softsign(b: B, n: N, dy: G) -> G:
    # 1 / (1 + |x|)^2
    x = n.x(0)
    d = b.op("Add", b.scalar(1.0, x), b.op("Abs", x))
    return [b.op("Div", dy[0], b.op("Mul", d, d))]


@gradient("Sin")
def _sin(b: B, n: N, dy: G) -> G:
    return [b.op("Mul", dy[0], b.op("Cos", n.x(0)))]


@gradient("Cos")
def _cos(b: B, n: N, dy: G) -> G:
    return [b.op("Neg", b.op("Mul", dy[0], b.op("Sin", n.x(0))))]


@gradient("Mod")
def _mod(b: B, n: N, dy: G) -> G:
    # y = a - q b with q = floor(a / b) (fmod=0, torch.remainder) or trunc(a / b) (fmod=1, torch.fmod):
    # dy/da = 1, dy/db = -q (q is piecewise constant). Only float tensors carry gradients here.
    a, c = n.x(0), n.x(1)
    da = b.unbroadcast(dy[0], a) if n.needs(0) else None
    db = None
    if n.needs(1):
        q = b.op("Div", a, c)
        if int(n.attr("fmod", 0)):
            q = b.op("Where", b.op("Less", q, b.scalar(0.0, q)), b.op("Ceil", q), b.op("Floor", q))
        else:
            q = b.op("Floor", q)
        db = b.unbroadcast(b.op("Neg", b.op("Mul", dy[0], q)), c)
    return [da, db]


def _extreme(b: B, n: N, dy: G) -> G:
    # Max/Min: the gradient goes to the inputs equal to the result. At a tie it is split evenly among
    # the tied inputs, which for two inputs is torch.maximum/minimum's rule (half each) and for n
    # inputs is torch.amax's over the stacked inputs (1/k each of the k inputs that attain it).
    # An element where no input equals y (a NaN result) gets no gradient.
    y = n.y()
    hits = [b.op("CastLike", b.op("Equal", n.x(i), y), dy[0]) for i in range(n.n_inputs)]
    count = hits[0] if len(hits) == 1 else b.op("Sum", *hits)
    share = b.op("Div", dy[0], b.op("Max", count, b.scalar(1.0, dy[0])))
    return [b.unbroadcast(b.op("Mul", share, hits[i]), n.x(i)) if n.needs(i) else None
            for i in range(n.n_inputs)]


gradient("Max")(_extreme)
gradient("Min")(_extreme)
