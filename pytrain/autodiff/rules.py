"""Every gradient rule, one entry per op. ``b`` builds nodes, ``n`` is the forward node,
``dy`` the output gradients; each rule returns one gradient per forward input (None: none).
Formulas use standard ONNX ops where short, and pytrain's gradient kernels (docs/ops.md)."""
from __future__ import annotations

import math
from typing import List, Optional

from pytrain import dtypes
from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import gradient

G = List[Optional[str]]


# ---- element-wise arithmetic --------------------------------------------------------------
@gradient("Add")
def _add(b: B, n: N, dy: G) -> G:
    return [b.unbroadcast(dy[0], n.x(0)) if n.needs(0) else None,
            b.unbroadcast(dy[0], n.x(1)) if n.needs(1) else None]


@gradient("Sub")
def _sub(b: B, n: N, dy: G) -> G:
    return [b.unbroadcast(dy[0], n.x(0)) if n.needs(0) else None,
            b.unbroadcast(b.op("Neg", dy[0]), n.x(1)) if n.needs(1) else None]


@gradient("Mul")
def _mul(b: B, n: N, dy: G) -> G:
    return [b.unbroadcast(b.op("Mul", dy[0], n.x(1)), n.x(0)) if n.needs(0) else None,
            b.unbroadcast(b.op("Mul", dy[0], n.x(0)), n.x(1)) if n.needs(1) else None]


@gradient("Div")
def _div(b: B, n: N, dy: G) -> G:
    # d(a/c)/da = 1/c ; d(a/c)/dc = -a/c^2 = -y/c
    return [b.unbroadcast(b.op("Div", dy[0], n.x(1)), n.x(0)) if n.needs(0) else None,
            b.unbroadcast(b.op("Neg", b.op("Div", b.op("Mul", dy[0], n.y()), n.x(1))), n.x(1))
            if n.needs(1) else None]


@gradient("Pow")
def _pow(b: B, n: N, dy: G) -> G:
    a, p = n.x(0), n.x(1)
    da = dp = None
    if n.needs(0):  # p * a^(p-1)
        pf = b.op("CastLike", p, a)
        da = b.unbroadcast(b.op("Mul", dy[0], b.op("Mul", pf, b.op("Pow", a, b.op("Sub", pf, b.scalar(1.0, a))))), a)
    if n.needs(1):  # a^p * ln a, in p's type (Pow allows a float exponent of another type)
        dp = b.op("CastLike", b.unbroadcast(b.op("Mul", dy[0], b.op("Mul", n.y(), b.op("Log", a))), p), p)
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


@gradient("Softmax")
def _softmax(b: B, n: N, dy: G) -> G:
    return [b.pt("SoftmaxGrad", dy[0], n.y(), axis=int(n.attr("axis", -1)))]


@gradient("LogSoftmax")
def _log_softmax(b: B, n: N, dy: G) -> G:
    return [b.pt("LogSoftmaxGrad", dy[0], n.y(), axis=int(n.attr("axis", -1)))]


@gradient("Clip")
def _clip(b: B, n: N, dy: G) -> G:
    # dy flows to X inside [min, max] and to the bound X was clipped to outside it (torch.clamp)
    x, lo, hi = n.x(0), n.x(1), n.x(2)
    zero = b.scalar(0.0, dy[0])
    return [b.pt("ClipGrad", dy[0], x, lo, hi) if n.needs(0) else None,
            b.unbroadcast(b.op("Where", b.op("Less", x, lo), dy[0], zero), lo) if n.needs(1) else None,
            b.unbroadcast(b.op("Where", b.op("Greater", x, hi), dy[0], zero), hi) if n.needs(2) else None]


# ---- linear algebra and layers ----------------------------------------------------------------
@gradient("MatMul")
def _matmul(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("MatMulGrad", [dy[0], n.x(0), n.x(1)], [n.needs(0), n.needs(1)])


@gradient("Gemm")
def _gemm(b: B, n: N, dy: G) -> G:
    # Y = alpha * A' B' + beta * C with A' = A or A^T, B' = B or B^T
    a, w, c = n.x(0), n.x(1), n.x(2)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    ta, tb = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    g = dy[0]
    da = dw = dc = None
    if n.needs(0):
        da = (b.op("Gemm", g, w, alpha=alpha, transB=1 - tb) if not ta
              else b.op("Gemm", w, g, alpha=alpha, transA=tb, transB=1))
    if n.needs(1):
        dw = (b.op("Gemm", a, g, alpha=alpha, transA=1 - ta) if not tb
              else b.op("Gemm", g, a, alpha=alpha, transA=1, transB=ta))
    if c is not None and n.needs(2):
        gc = g if beta == 1.0 else b.op("Mul", g, b.scalar(beta, g))
        dc = b.unbroadcast(gc, c)
    return [da, dw, dc]


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@gradient("Conv")
def _conv(b: B, n: N, dy: G) -> G:
    attrs = {k: n.attr(k) for k in _CONV_ATTRS}
    return b.pt_outputs("ConvGrad", [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.x(2) is not None and n.needs(2)], **attrs)


@gradient("MaxPool", outputs=(0,))
def _max_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("MaxPoolGrad", dy[0], n.saved(1), n.x(0), storage_order=int(n.attr("storage_order", 0)))]


_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides")


@gradient("AveragePool")
def _average_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("AveragePoolGrad", dy[0], n.x(0), **{k: n.attr(k) for k in _POOL_ATTRS})]


@gradient("GlobalAveragePool")
def _global_average_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("GlobalAveragePoolGrad", dy[0], n.x(0))]


@gradient("BatchNormTraining", domain="ai.pytrain", inputs=(0, 1, 2), outputs=(0,))
def _batch_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("BatchNormGrad", [dy[0], n.x(0), n.x(1), n.saved(3), n.saved(4)],
                        [n.needs(0), n.needs(1), n.needs(2)])


@gradient("BatchNormalization", inputs=(0, 1, 2), outputs=(0,))
def _batch_norm_inference(b: B, n: N, dy: G) -> G:
    # Inference mode (running statistics): the training graph keeps a BatchNormalization whose
    # scale and bias do not train as is (a frozen backbone in eval()); the generator rewrites every
    # other one to BatchNormTraining, so training_mode=1 never reaches this rule.
    if int(n.attr("training_mode", 0)):
        from pytrain.errors import UnsupportedOpError
        raise UnsupportedOpError("BatchNormalization node %r has training_mode=1: its gradient is that of "
                                 "ai.pytrain.BatchNormTraining (generate_artifacts rewrites it)" % n.node.name)
    return b.pt_outputs("BatchNormInferenceGrad", [dy[0], n.x(0), n.x(1), n.x(3), n.x(4)],
                        [n.needs(0), n.needs(1), n.needs(2)], epsilon=float(n.attr("epsilon", 1e-5)))


@gradient("LayerNormalization", inputs=(0, 1, 2), outputs=(0,))
def _layer_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("LayerNormalizationGrad", [dy[0], n.x(0), n.x(1), n.saved(1), n.saved(2)],
                        [n.needs(0), n.needs(1), n.x(2) is not None and n.needs(2)],
                        axis=int(n.attr("axis", -1)), epsilon=float(n.attr("epsilon", 1e-5)))


@gradient("Dropout", inputs=(0,), outputs=(0,))
def _dropout(b: B, n: N, dy: G) -> G:
    return [b.pt("DropoutGrad", dy[0], n.saved(1), n.x(1))]


@gradient("SoftmaxCrossEntropyLoss", inputs=(0,), outputs=(0,))
def _softmax_cross_entropy(b: B, n: N, dy: G) -> G:
    ignore = n.attr("ignore_index")
    return [b.pt("SoftmaxCrossEntropyLossGrad", dy[0], n.saved(1), n.x(1), n.x(2),
                 reduction=n.attr("reduction", "mean"), ignore_index=ignore)]


@gradient("NegativeLogLikelihoodLoss", inputs=(0,))
def _nll_loss(b: B, n: N, dy: G) -> G:
    return [b.pt("NegativeLogLikelihoodLossGrad", dy[0], n.x(0), n.x(1), n.x(2),
                 reduction=n.attr("reduction", "mean"), ignore_index=n.attr("ignore_index"))]


@gradient("Gather", inputs=(0,))
def _gather(b: B, n: N, dy: G) -> G:
    return [b.pt("GatherGrad", dy[0], n.x(1), n.x(0), axis=int(n.attr("axis", 0)))]


# ---- shape and data movement -----------------------------------------------------------------
def _reshape_back(b: B, n: N, dy: G) -> G:
    return [b.op("Reshape", dy[0], b.op("Shape", n.x(0)))]


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    gradient(_op, inputs=(0,))(_reshape_back)


@gradient("Identity")
def _identity(b: B, n: N, dy: G) -> G:
    return [dy[0]]


@gradient("Transpose")
def _transpose(b: B, n: N, dy: G) -> G:
    perm = n.attr("perm")
    if perm is None:  # default reverses the axes, which is its own inverse
        return [b.op("Transpose", dy[0])]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [b.op("Transpose", dy[0], perm=inverse)]


@gradient("Cast", when=lambda n: dtypes.is_float(int(n.attr("to", 0))))
def _cast(b: B, n: N, dy: G) -> G:
    return [b.op("CastLike", dy[0], n.x(0))]


@gradient("CastLike", inputs=(0,))
def _cast_like(b: B, n: N, dy: G) -> G:
    return [b.op("CastLike", dy[0], n.x(0)), None]


@gradient("Expand", inputs=(0,))
def _expand(b: B, n: N, dy: G) -> G:
    return [b.unbroadcast(dy[0], n.x(0))]


@gradient("Concat")
def _concat(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("ConcatGrad", [dy[0]] + [n.x(i) for i in range(n.n_inputs)],
                        [n.needs(i) for i in range(n.n_inputs)], axis=int(n.attr("axis")))


@gradient("Split", inputs=(0,))
def _split(b: B, n: N, dy: G) -> G:
    outs = [n.y(i) for i in range(len(n.node.output))]
    return [b.pt("SplitGrad", *(outs + list(dy)), axis=int(n.attr("axis", 0)))]


@gradient("Slice", inputs=(0,))
def _slice(b: B, n: N, dy: G) -> G:
    return [b.pt("SliceGrad", dy[0], n.x(0), n.x(1), n.x(2), n.x(3), n.x(4))]


@gradient("Where", inputs=(1, 2))
def _where(b: B, n: N, dy: G) -> G:
    c = n.x(0)
    zero = b.scalar(0.0, dy[0])
    return [None,
            b.unbroadcast(b.op("Where", c, dy[0], zero), n.x(1)) if n.needs(1) else None,
            b.unbroadcast(b.op("Where", c, zero, dy[0]), n.x(2)) if n.needs(2) else None]


# ---- reductions ---------------------------------------------------------------------------------
def _reduce_attrs(n: N) -> dict:
    return {"axes": n.attr("axes"), "keepdims": int(n.attr("keepdims", 1)),
            "noop_with_empty_axes": int(n.attr("noop_with_empty_axes", 0))}


@gradient("ReduceSum", inputs=(0,))
def _reduce_sum(b: B, n: N, dy: G) -> G:
    return [b.pt("ReduceGrad", dy[0], n.x(0), n.x(1), mode="sum", **_reduce_attrs(n))]


@gradient("ReduceMean", inputs=(0,))
def _reduce_mean(b: B, n: N, dy: G) -> G:
    return [b.pt("ReduceGrad", dy[0], n.x(0), n.x(1), mode="mean", **_reduce_attrs(n))]


def _reduce_extreme(b: B, n: N, dy: G) -> G:
    return [b.pt("ReduceMaxGrad", dy[0], n.x(0), n.y(), n.x(1), **_reduce_attrs(n))]


gradient("ReduceMax", inputs=(0,))(_reduce_extreme)
gradient("ReduceMin", inputs=(0,))(_reduce_extreme)


# ---- more activations and element-wise math (HardSwish, Elu, PRelu, Sin, Mod, Max/Min, ...) ---
def _inside(b: B, z: str) -> str:
    """Where 0 < z < 1: the linear part of a hard sigmoid (the gradient is 0 on both flat parts and,
    as torch, at the corners)."""
    return b.op("And", b.op("Greater", z, b.scalar(0.0, z)), b.op("Less", z, b.scalar(1.0, z)))


@gradient("HardSigmoid")
def _hard_sigmoid(b: B, n: N, dy: G) -> G:
    x, alpha = n.x(0), float(n.attr("alpha", 0.2))
    z = b.op("Add", b.op("Mul", x, b.scalar(alpha, x)), b.scalar(float(n.attr("beta", 0.5)), x))
    return [b.op("Where", _inside(b, z), b.op("Mul", dy[0], b.scalar(alpha, x)), b.zeros_like(x))]


@gradient("HardSwish")
def _hard_swish(b: B, n: N, dy: G) -> G:
    # y = x h(x), h = HardSigmoid(1/6, 1/2): dy/dx = h + x/6 on -3 < x < 3, else h (0 below, 1 above)
    x = n.x(0)
    sixth = b.op("Div", x, b.scalar(6.0, x))
    z = b.op("Add", sixth, b.scalar(0.5, x))
    h = b.op("Clip", z, b.scalar(0.0, x), b.scalar(1.0, x))
    slope = b.op("Where", _inside(b, z), b.op("Add", h, sixth), h)
    return [b.op("Mul", dy[0], slope)]


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


# (end of element-wise rules)


# ---- shape, indexing and scattering (GatherElements, Scatter*, Trilu, Pad, Tile, ...) ------------
@gradient("GatherElements", inputs=(0,))
def _gather_elements(b: B, n: N, dy: G) -> G:
    return [b.pt("GatherElementsGrad", dy[0], n.x(1), n.x(0), axis=int(n.attr("axis", 0))), None]


def _scatter(b: B, n: N, dy: G, **attrs: object) -> G:
    # none/add need only dY and the indices; mul/max/min also the values met at each position
    red = n.attr("reduction", "none")
    values = [n.x(0), n.x(2), n.y()] if red in ("mul", "max", "min") else []
    d = b.pt_outputs(n.node.op_type + "Grad", [dy[0], n.x(1)] + values, [n.needs(0), n.needs(2)],
                     reduction=red, **attrs)
    return [d[0], None, d[1]]


@gradient("ScatterElements", inputs=(0, 2))
def _scatter_elements(b: B, n: N, dy: G) -> G:
    return _scatter(b, n, dy, axis=int(n.attr("axis", 0)))


@gradient("ScatterND", inputs=(0, 2))
def _scatter_nd(b: B, n: N, dy: G) -> G:
    return _scatter(b, n, dy)


@gradient("Trilu", inputs=(0,))
def _trilu(b: B, n: N, dy: G) -> G:
    # Trilu keeps or zeroes each element: its gradient applies the same mask to dy
    return [b.op("Trilu", dy[0], n.x(1), upper=int(n.attr("upper", 1))), None]


@gradient("Pad", inputs=(0, 2))
def _pad(b: B, n: N, dy: G) -> G:
    mode = n.attr("mode", "constant")
    x, pads, value, axes = n.x(0), n.x(1), n.x(2), n.x(3)
    if pads is None:  # opset < 11 kept pads in an attribute, which pytrain's Pad does not read
        from pytrain.errors import UnsupportedOpError
        from pytrain.graph import node_label
        raise UnsupportedOpError("node %s: Pad without a pads input (opset < 11) has no gradient rule; "
                                 "export with opset 11 or later" % node_label(n.node))
    dx = dv = None
    if n.needs(0):
        # constant mode: dX is dY with the padding cut off and the cropped parts zero-filled,
        # which is Pad with the pads negated; other modes fold the copies back (PadGrad)
        dx = (b.op("Pad", dy[0], b.op("Neg", pads), None, axes) if mode == "constant"
              else b.pt("PadGrad", dy[0], x, pads, axes, mode=mode))
    if value is not None and n.needs(2) and mode == "constant":
        # d constant_value = sum of dY over the padded positions (marked by padding zeros with 1)
        marks = b.op("Pad", b.zeros_like(x), pads, b.scalar(1.0, x), axes)
        dv = b.op("Reshape", b.op("ReduceSum", b.op("Mul", dy[0], marks), keepdims=0), b.op("Shape", value))
    return [dx, None, dv, None]


@gradient("Tile", inputs=(0,))
def _tile(b: B, n: N, dy: G) -> G:
    return [b.pt("TileGrad", dy[0], n.x(0), n.x(1)), None]


@gradient("GatherND", inputs=(0,))
def _gather_nd(b: B, n: N, dy: G) -> G:
    return [b.pt("GatherNDGrad", dy[0], n.x(1), n.x(0), batch_dims=int(n.attr("batch_dims", 0)))]


# (end of indexing rules)


# ---- more reductions (ReduceL1/L2/LogSumExp/SumSquare/Prod, CumSum, TopK, Einsum, ...) ----------
def _reduce_norm(mode: str, with_y: bool):
    def rule(b: B, n: N, dy: G) -> G:
        return [b.pt("ReduceNormGrad", dy[0], n.x(0), n.y() if with_y else None, n.x(1), mode=mode,
                     **_reduce_attrs(n))]
    return rule


# dX = dY * sign(X) | X / Y | 2X | 1 / sum(X) | exp(X - Y), broadcast back over the reduced axes
for _op, _mode, _with_y in (("ReduceL1", "l1", False), ("ReduceL2", "l2", True),
                            ("ReduceSumSquare", "sum_square", False), ("ReduceLogSum", "log_sum", False),
                            ("ReduceLogSumExp", "log_sum_exp", True)):
    gradient(_op, inputs=(0,))(_reduce_norm(_mode, _with_y))


@gradient("ReduceProd", inputs=(0,))
def _reduce_prod(b: B, n: N, dy: G) -> G:
    # dX = dY * (product of the other elements), never Y / X (wrong where X holds zeros)
    return [b.pt("ReduceProdGrad", dy[0], n.x(0), n.x(1), **_reduce_attrs(n))]


@gradient("GlobalMaxPool")
def _global_max_pool(b: B, n: N, dy: G) -> G:
    return [b.pt("GlobalMaxPoolGrad", dy[0], n.x(0))]


@gradient("CumSum", inputs=(0,))
def _cum_sum(b: B, n: N, dy: G) -> G:
    # x[i] feeds every y[j] with j after i (or before, reversed): the adjoint is the cumulative sum
    # of dY in the other direction, with the same exclusive flag
    return [b.op("CumSum", dy[0], n.x(1), exclusive=int(n.attr("exclusive", 0)),
                 reverse=1 - int(n.attr("reverse", 0)))]


@gradient("TopK", inputs=(0,), outputs=(0,))
def _top_k(b: B, n: N, dy: G) -> G:
    return [b.pt("TopKGrad", dy[0], n.saved(1), n.x(0), axis=int(n.attr("axis", -1)))]


@gradient("Einsum")
def _einsum(b: B, n: N, dy: G) -> G:
    from pytrain.ops.reduce.op_einsum import parse
    eq = parse(n.attr("equation"), n.n_inputs)
    return [_einsum_operand_grad(b, n, eq, k, dy[0]) if n.needs(k) else None for k in range(n.n_inputs)]


def _einsum_operand_grad(b: B, n: N, eq, k: int, dy: str) -> str:
    """d/dX_k of sum(dY * einsum(...)) = einsum of dY with the other operands, onto X_k's term."""
    from pytrain.ops.reduce.op_einsum import ELLIPSIS, labels
    x = n.x(k)
    terms = [eq.output] + [t for j, t in enumerate(eq.inputs) if j != k]
    names = [dy] + [n.x(j) for j in range(n.n_inputs) if j != k]
    # A label repeated in X_k's term (a diagonal, a trace) gets a fresh label per repetition, and an
    # identity matrix operand ties the two: the gradient lands on the diagonal, 0 elsewhere.
    term = _einsum_distinct_labels(b, n, eq, k, terms, names)
    seen = set(c for t in terms for c in labels(t))
    if any(c not in seen for c in labels(term)) or (ELLIPSIS in term and not any(ELLIPSIS in t for t in terms)):
        # axes summed in X_k alone: dY is constant along them; ones shaped like X_k bring them back
        terms.append(term)
        names.append(b.op("Expand", b.scalar(1.0, x), b.op("Shape", x)))

    # The result's axes follow the operands' broadcast shapes: larger than X_k's where X_k has a
    # size-1 label or fewer '...' axes (summed back), size 1 where only the others had size 1
    # (expanded). Both are no-ops in the usual case; '...' goes first so numpy's rules apply.
    def fit(g: str, like: str) -> str:
        return b.unbroadcast(b.op("Expand", g, b.op("Shape", like)), like)

    if not any(ELLIPSIS in t for t in terms):
        return fit(b.op("Einsum", *names, equation=",".join(terms) + "->" + term), x)
    lead = ELLIPSIS + term.replace(ELLIPSIS, "")
    g = b.op("Einsum", *names, equation=",".join(terms) + "->" + lead)
    if ELLIPSIS not in term or term.startswith(ELLIPSIS):
        return fit(g, x)
    g = fit(g, b.op("Einsum", x, equation=term + "->" + lead))
    return b.op("Einsum", g, equation=lead + "->" + term)


def _einsum_distinct_labels(b: B, n: N, eq, k: int, terms: list, names: list) -> str:
    """X_k's term with every repeated label renamed to a fresh one; for each renaming, an identity
    matrix over (label, fresh label) is appended to ``terms``/``names``."""
    from pytrain.errors import UnsupportedOpError
    from pytrain.ops.reduce.op_einsum import ELLIPSIS, labels
    term, x = eq.inputs[k], n.x(k)
    named = labels(term)
    if len(set(named)) == len(named):
        return term
    used = set(c for t in eq.inputs + [eq.output] for c in labels(t))
    fresh = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
    head = len(labels(term.split(ELLIPSIS)[0])) if ELLIPSIS in term else len(named)
    shape = b.op("Shape", x)
    renamed = []
    for j, c in enumerate(named):
        if c not in renamed:
            renamed.append(c)
            continue
        if not fresh:
            raise UnsupportedOpError("Einsum node %r (equation %r): no letter left to differentiate the "
                                     "repeated label %r of input %d" % (n.node.name, str(eq), c, k))
        new = fresh.pop(0)
        renamed.append(new)
        # the size of the axis (counted from the end after a '...'), then eye = (range == range^T)
        axis = j if j < head else j - len(named)
        size = b.op("Gather", shape, b.const(axis, dtype="int64"), axis=0)
        r = b.op("Range", b.const(0, dtype="int64"), size, b.const(1, dtype="int64"))
        eye = b.op("Where", b.op("Equal", b.op("Reshape", r, b.const([-1, 1], dtype="int64")), r),
                   b.scalar(1.0, x), b.scalar(0.0, x))
        terms.append(c + new)
        names.append(eye)
    out = "".join(renamed)
    if ELLIPSIS in term:
        out = out[:head] + ELLIPSIS + out[head:]
    return out


# (end of reduction rules)


# ---- transposed convolution and resizing (ConvTranspose, Resize, Upsample) -----------------------
_CONV_TRANSPOSE_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape",
                         "pads", "strides")


@gradient("ConvTranspose")
def _conv_transpose(b: B, n: N, dy: G) -> G:
    # the adjoint of ConvTranspose is a Conv: ConvTransposeGrad runs it (docs/ops.md)
    attrs = {k: n.attr(k) for k in _CONV_TRANSPOSE_ATTRS}
    return b.pt_outputs("ConvTransposeGrad", [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.x(2) is not None and n.needs(2)], **attrs)


@gradient("Resize", inputs=(0,))
def _resize(b: B, n: N, dy: G) -> G:
    if n.n_inputs == 2:  # Resize-10 (X, scales): asymmetric coordinates, onnxruntime's nearest rounding
        return [b.pt("ResizeGrad", dy[0], n.x(0), None, n.x(1), mode=n.attr("mode", "nearest"),
                     coordinate_transformation_mode="asymmetric", nearest_mode="simple")]
    return [b.pt("ResizeGrad", dy[0], n.x(0), n.x(1), n.x(2), n.x(3), **n.attrs)]


@gradient("Upsample", inputs=(0,))
def _upsample(b: B, n: N, dy: G) -> G:
    scales = n.x(1)
    if scales is None:  # Upsample-7: scales is an attribute
        scales = b.const([float(s) for s in n.attr("scales", [])], hint="upsample_scales")
    return [b.pt("ResizeGrad", dy[0], n.x(0), None, scales, mode=n.attr("mode", "nearest"),
                 coordinate_transformation_mode="asymmetric", nearest_mode="simple")]
# (end of resizing rules)


# ---- normalization and attention (InstanceNormalization, GroupNormalization, RMSNormalization,
#      Attention) --------------------------------------------------------------------------------
@gradient("InstanceNormalization", inputs=(0, 1, 2))
def _instance_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("InstanceNormalizationGrad", [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.needs(2)], epsilon=float(n.attr("epsilon", 1e-5)))


@gradient("GroupNormalization", inputs=(0, 1, 2))
def _group_norm(b: B, n: N, dy: G) -> G:
    # One kernel for both forms: scale's shape says per group (opset 18) or per channel (opset 21).
    return b.pt_outputs("GroupNormalizationGrad", [dy[0], n.x(0), n.x(1)],
                        [n.needs(0), n.needs(1), n.needs(2)], num_groups=n.attr("num_groups"),
                        epsilon=float(n.attr("epsilon", 1e-5)), stash_type=int(n.attr("stash_type", 1)))


@gradient("RMSNormalization", inputs=(0, 1))
def _rms_norm(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("RMSNormalizationGrad", [dy[0], n.x(0), n.x(1)], [n.needs(0), n.needs(1)],
                        axis=int(n.attr("axis", -1)), epsilon=float(n.attr("epsilon", 1e-5)),
                        stash_type=int(n.attr("stash_type", 1)))


_ATTENTION_ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "scale", "softcap", "softmax_precision",
                    "left_window_size", "right_window_size")


@gradient("Attention", inputs=(0, 1, 2, 3, 4, 5))
def _attention(b: B, n: N, dy: G) -> G:
    # Y only: present_key/present_value (a cache for the next call) and the qk_matmul_output debug
    # output are not trained through; a loss that depends on them is refused, not silently cut.
    for i, name in ((1, "present_key"), (2, "present_value"), (3, "qk_matmul_output")):
        if i < len(dy) and dy[i] is not None:
            from pytrain.errors import UnsupportedOpError
            from pytrain.graph import node_label
            raise UnsupportedOpError("Attention node %s: the loss depends on its output %s, whose gradient "
                                     "pytrain does not implement (only Y is differentiable)" % (node_label(n.node), name))
    attrs = {k: n.attr(k) for k in _ATTENTION_ATTRS if n.attr(k) is not None}
    return b.pt_outputs("AttentionGrad", [dy[0]] + [n.x(i) for i in range(min(n.n_inputs, 7))],
                        [n.needs(i) for i in range(6)], **attrs)


# (end of normalization rules)


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
# (end of recurrent rules)
