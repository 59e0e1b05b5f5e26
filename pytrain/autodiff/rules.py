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
# (end of element-wise rules)


# ---- shape, indexing and scattering (GatherElements, Scatter*, Trilu, Pad, Tile, ...) ------------
# (end of indexing rules)


# ---- more reductions (ReduceL1/L2/LogSumExp/SumSquare/Prod, CumSum, TopK, Einsum, ...) ----------
# (end of reduction rules)


# ---- transposed convolution and resizing (ConvTranspose, Resize, Upsample) -----------------------
# (end of resizing rules)


# ---- normalization and attention (InstanceNormalization, GroupNormalization, RMSNormalization,
#      Attention) --------------------------------------------------------------------------------
# (end of normalization rules)


# ---- recurrent layers (RNN, GRU, LSTM) ---------------------------------------------------------
# (end of recurrent rules)
