"""Every gradient RULE checked end to end through the artifact generator.

For each op with a rule (``pytrain.autodiff.differentiable_ops()``) a tiny float64 ONNX model
applies the op to initializers; the loss is ReduceSum(Mul(output, R)) with a fixed random R.
``generate_artifacts(loss=None)`` builds the training model, one train step yields
``state.parameters[p].grad``, and that is compared with central finite differences of the same
scalar computed by the forward model (pytrain's executor, inference semantics) in float64.

Then layer-level checks against torch.autograd in float32, the built-in losses, and the
generator's error paths.
"""
from __future__ import annotations

import functools
import glob
import importlib
import os
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from grad_harness import (ATOL, F64, RNG, RTOL, Case, away, binary, check, f32, fd_grads, i64, node, rand,
                          train_grads, unary, with_loss)
from pytrain.generator import artifacts, losses
from pytrain.device.api import CheckpointState, Module
from pytrain.autodiff import differentiable_ops, get_rule
from pytrain.errors import UnsupportedOpError
from pytrain.engine.executor import Plan
from pytrain.proto import ModelProto



def _pow() -> List[Case]:
    return [
        Case("Pow tensors", [node("Pow", ["A", "P"])], {"A": rand(2, 3, lo=0.5, hi=2.0), "P": rand(3, lo=-1.5, hi=2.5)}, ["Y"]),
        Case("Pow float exponent", [node("Pow", ["A", "P"])], {"A": rand(2, 3, lo=0.5, hi=2.0), "P": np.array(1.7)}, ["Y"],
             params=["A"]),
        Case("Pow scalar exponent trained", [node("Pow", ["A", "P"])], {"A": rand(2, 3, lo=0.5, hi=2.0), "P": np.array(-0.6)},
             ["Y"]),
        Case("Pow int exponent", [node("Pow", ["A", "P"])], {"A": rand(2, 3), "P": i64(3)}, ["Y"]),
    ]


def _sum_mean(op: str) -> List[Case]:
    return [
        Case(op + " 3 inputs broadcast", [node(op, ["A", "B", "C"])],
             {"A": rand(2, 3), "B": rand(3), "C": rand(2, 1)}, ["Y"]),
        Case(op + " 1 input", [node(op, ["A"])], {"A": rand(2, 3)}, ["Y"]),
        Case(op + " same input twice", [node(op, ["A", "A", "B"])], {"A": rand(2, 3), "B": rand(1)}, ["Y"]),
    ]


def _gemm() -> List[Case]:
    cases = []
    for ta in (0, 1):
        for tb in (0, 1):
            a = rand(2, 3) if not ta else rand(3, 2)
            w = rand(3, 4) if not tb else rand(4, 3)
            cases.append(Case("Gemm transA=%d transB=%d" % (ta, tb),
                              [node("Gemm", ["A", "W", "C"], transA=ta, transB=tb, alpha=0.7, beta=1.3)],
                              {"A": a, "W": w, "C": rand(4)}, ["Y"]))
    cases += [
        Case("Gemm no C", [node("Gemm", ["A", "W"])], {"A": rand(2, 3), "W": rand(3, 4)}, ["Y"]),
        Case("Gemm C column", [node("Gemm", ["A", "W", "C"], beta=0.5)],
             {"A": rand(2, 3), "W": rand(3, 4), "C": rand(2, 1)}, ["Y"]),
        Case("Gemm C scalar", [node("Gemm", ["A", "W", "C"])], {"A": rand(2, 3), "W": rand(3, 4), "C": rand(1)}, ["Y"]),
        Case("Gemm C full", [node("Gemm", ["A", "W", "C"], transB=1, alpha=2.0)],
             {"A": rand(2, 3), "W": rand(4, 3), "C": rand(2, 4)}, ["Y"]),
    ]
    return cases


def _matmul() -> List[Case]:
    shapes = [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)),
              ((2, 1, 2, 3), (3, 3, 2)), ((2, 3), (2, 3, 4))]
    return [Case("MatMul %s @ %s" % (a, b), [node("MatMul", ["A", "B"])], {"A": rand(*a), "B": rand(*b)}, ["Y"])
            for a, b in shapes]


def _conv() -> List[Case]:
    return [
        Case("Conv 3x3 bias", [node("Conv", ["X", "W", "B"])], {"X": rand(1, 2, 4, 4), "W": rand(3, 2, 3, 3), "B": rand(3)}, ["Y"]),
        Case("Conv stride 2 pad 1 no bias", [node("Conv", ["X", "W"], strides=[2, 2], pads=[1, 1, 1, 1])],
             {"X": rand(2, 1, 5, 4), "W": rand(2, 1, 3, 2)}, ["Y"]),
        Case("Conv group 2 dilation", [node("Conv", ["X", "W", "B"], group=2, dilations=[2, 1], pads=[1, 0, 0, 1])],
             {"X": rand(1, 4, 5, 4), "W": rand(4, 2, 2, 2), "B": rand(4)}, ["Y"]),
        Case("Conv depthwise same_upper", [node("Conv", ["X", "W"], group=2, auto_pad="SAME_UPPER", strides=[2, 2])],
             {"X": rand(1, 2, 5, 5), "W": rand(2, 1, 2, 2)}, ["Y"]),
        Case("Conv 1-D", [node("Conv", ["X", "W", "B"], pads=[1, 1])], {"X": rand(2, 2, 5), "W": rand(3, 2, 3), "B": rand(3)}, ["Y"]),
    ]


def _distinct(*shape: int) -> np.ndarray:
    """Values with no ties (pooling and max-reductions are smooth there)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.1 - n * 0.05 + RNG.uniform(-0.01, 0.01, n)).reshape(shape).astype(np.float64)


def _maxpool() -> List[Case]:
    return [
        Case("MaxPool 2x2", [node("MaxPool", ["X"], kernel_shape=[2, 2])], {"X": _distinct(1, 2, 4, 4)}, ["Y"]),
        Case("MaxPool 3x3 stride 2 pad 1", [node("MaxPool", ["X"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
             {"X": _distinct(2, 1, 5, 5)}, ["Y"]),
        Case("MaxPool overlapping ceil", [node("MaxPool", ["X"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
             {"X": _distinct(1, 1, 5, 5)}, ["Y"]),
        Case("MaxPool with Indices exposed", [node("MaxPool", ["X"], ["Y", "I"], kernel_shape=[2, 2], strides=[1, 1])],
             {"X": _distinct(1, 2, 3, 3)}, ["Y"]),
        Case("MaxPool 1-D", [node("MaxPool", ["X"], kernel_shape=[2], strides=[1])], {"X": _distinct(1, 2, 5)}, ["Y"]),
        Case("MaxPool dilations", [node("MaxPool", ["X"], kernel_shape=[2, 2], dilations=[2, 1])], {"X": _distinct(1, 2, 5, 4)}, ["Y"]),
        Case("MaxPool storage_order 1", [node("MaxPool", ["X"], kernel_shape=[2, 2], strides=[1, 1], storage_order=1)],
             {"X": _distinct(2, 2, 4, 3)}, ["Y"]),
        Case("MaxPool storage_order 1 Indices exposed",
             [node("MaxPool", ["X"], ["Y", "I"], kernel_shape=[2, 2], strides=[2, 1], storage_order=1)],
             {"X": _distinct(1, 2, 4, 3)}, ["Y"]),
    ]


def _avgpool() -> List[Case]:
    return [
        Case("AveragePool 2x2", [node("AveragePool", ["X"], kernel_shape=[2, 2], strides=[2, 2])], {"X": rand(1, 2, 4, 4)}, ["Y"]),
        Case("AveragePool pad exclude", [node("AveragePool", ["X"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
             {"X": rand(2, 1, 5, 5)}, ["Y"]),
        Case("AveragePool pad include", [node("AveragePool", ["X"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                             count_include_pad=1)], {"X": rand(1, 1, 5, 5)}, ["Y"]),
        Case("AveragePool same_lower", [node("AveragePool", ["X"], kernel_shape=[2, 3], auto_pad="SAME_LOWER")],
             {"X": rand(1, 2, 4, 4)}, ["Y"]),
        Case("AveragePool 1-D", [node("AveragePool", ["X"], kernel_shape=[3], strides=[2])], {"X": rand(2, 1, 7)}, ["Y"]),
        Case("AveragePool dilations opset 19", [node("AveragePool", ["X"], kernel_shape=[2, 2], dilations=[2, 2])],
             {"X": rand(1, 1, 5, 5)}, ["Y"], opset=19),
        Case("AveragePool ceil", [node("AveragePool", ["X"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
             {"X": rand(1, 1, 5, 5)}, ["Y"]),
    ]


def _global_avgpool() -> List[Case]:
    return [Case("GlobalAveragePool 2-D", [node("GlobalAveragePool", ["X"])], {"X": rand(2, 3, 2, 3)}, ["Y"]),
            Case("GlobalAveragePool 1-D", [node("GlobalAveragePool", ["X"])], {"X": rand(2, 3, 4)}, ["Y"])]


def _softmax(op: str) -> List[Case]:
    return [Case("%s axis %d" % (op, ax), [node(op, ["X"], axis=ax)], {"X": rand(2, 3, 4, lo=-2, hi=2)}, ["Y"])
            for ax in (-1, 1, 0)]


def _transpose() -> List[Case]:
    return [Case("Transpose perm", [node("Transpose", ["X"], perm=[1, 2, 0])], {"X": rand(2, 3, 4)}, ["Y"]),
            Case("Transpose default", [node("Transpose", ["X"])], {"X": rand(2, 3, 4)}, ["Y"])]


def _concat() -> List[Case]:
    return [Case("Concat axis %d" % ax, [node("Concat", ["A", "B", "C"], axis=ax)],
                 {"A": rand(2, 3), "B": rand(2, 3) if ax == -1 else rand(1, 3), "C": rand(2, 3)}, ["Y"])
            for ax in (0, -1)] + [
        Case("Concat one input constant", [node("Concat", ["A", "K"], axis=1)], {"A": rand(2, 2), "K": rand(2, 3)}, ["Y"],
             params=["A"])]


def _split() -> List[Case]:
    return [
        Case("Split opset13 sizes, one output unused", [node("Split", ["X", "S"], ["Y0", "Y1", "Y2"], axis=1)],
             {"X": rand(2, 6), "S": i64(1, 2, 3)}, ["Y0", "Y2"], opset=13),
        Case("Split opset18 num_outputs, middle only", [node("Split", ["X"], ["Y0", "Y1", "Y2"], axis=0, num_outputs=3)],
             {"X": rand(6, 2)}, ["Y1"], opset=18),
        Case("Split opset18 uneven num_outputs", [node("Split", ["X"], ["Y0", "Y1", "Y2"], axis=-1, num_outputs=3)],
             {"X": rand(2, 7)}, ["Y0", "Y2"], opset=18),
        Case("Split opset11 attribute", [node("Split", ["X"], ["Y0", "Y1"], axis=1, split=[3, 1])],
             {"X": rand(2, 4)}, ["Y1"], opset=11),
        Case("Split equal default axis, all used", [node("Split", ["X"], ["Y0", "Y1"])], {"X": rand(4, 3)}, ["Y0", "Y1"], opset=13),
    ]


def _slice() -> List[Case]:
    return [
        Case("Slice basic", [node("Slice", ["X", "s", "e"])], {"X": rand(4, 5), "s": i64(1, 0), "e": i64(3, 4)}, ["Y"]),
        Case("Slice axes steps", [node("Slice", ["X", "s", "e", "a", "t"])],
             {"X": rand(3, 6), "s": i64(0), "e": i64(6), "a": i64(1), "t": i64(2)}, ["Y"]),
        Case("Slice negative step", [node("Slice", ["X", "s", "e", "a", "t"])],
             {"X": rand(3, 6), "s": i64(-1, 4), "e": i64(-10, 0), "a": i64(0, -1), "t": i64(-1, -2)}, ["Y"]),
        Case("Slice ends past the end", [node("Slice", ["X", "s", "e", "a"])],
             {"X": rand(3, 4), "s": i64(1, -100), "e": i64(2 ** 62, 100), "a": i64(0, 1)}, ["Y"]),
        Case("Slice negative indices", [node("Slice", ["X", "s", "e", "a"])],
             {"X": rand(3, 6), "s": i64(-4), "e": i64(-1), "a": i64(1)}, ["Y"]),
    ]


def _gather() -> List[Case]:
    return [
        Case("Gather axis 0 repeated", [node("Gather", ["X", "I"], axis=0)], {"X": rand(5, 3), "I": i64(0, 3, 3, 1)}, ["Y"]),
        Case("Gather axis 1 2-D indices", [node("Gather", ["X", "I"], axis=1)],
             {"X": rand(2, 4, 2), "I": np.array([[0, 2], [3, 0]], dtype=np.int64)}, ["Y"]),
        Case("Gather negative index scalar", [node("Gather", ["X", "I"], axis=1)], {"X": rand(3, 4), "I": np.array(-1)}, ["Y"]),
    ]


def _reduce(op: str, make: Callable[..., np.ndarray] = rand) -> List[Case]:
    cases = []
    for keep in (0, 1):
        cases.append(Case("%s opset13 axes attr [1] keepdims=%d" % (op, keep),
                          [node(op, ["X"], axes=[1], keepdims=keep)] if op != "ReduceSum" else
                          [node(op, ["X", "A"], keepdims=keep)],
                          {"X": make(2, 3, 4), **({"A": i64(1)} if op == "ReduceSum" else {})}, ["Y"], opset=13))
        cases.append(Case("%s opset18 axes input [0,-1] keepdims=%d" % (op, keep),
                          [node(op, ["X", "A"], keepdims=keep)], {"X": make(2, 3, 4), "A": i64(0, -1)}, ["Y"], opset=18))
    cases.append(Case(op + " all axes", [node(op, ["X"])], {"X": make(2, 3)}, ["Y"], opset=18))
    cases.append(Case(op + " all axes keepdims=0", [node(op, ["X"], keepdims=0)], {"X": make(2, 3)}, ["Y"], opset=13))
    cases.append(Case(op + " opset11 axes attr", [node(op, ["X"], axes=[0, 2], keepdims=0)], {"X": make(2, 3, 2)}, ["Y"],
                      opset=11))
    cases.append(Case(op + " noop_with_empty_axes", [node(op, ["X"], noop_with_empty_axes=1)], {"X": make(2, 3)}, ["Y"],
                      opset=18))
    cases.append(Case(op + " empty axes input", [node(op, ["X", "A"], keepdims=0)],
                      {"X": make(2, 3), "A": np.zeros(0, np.int64)}, ["Y"], opset=18))
    return cases


def _clip() -> List[Case]:
    x = away(3, 4, gap=0.05, scale=2.0)
    x[np.abs(np.abs(x) - 0.8) < 0.05] = 1.3  # away from the bounds
    # the bounds get the gradient of the elements clipped to them (as torch.clamp with tensor bounds)
    return [
        Case("Clip min max", [node("Clip", ["X", "lo", "hi"])], {"X": x, "lo": np.array(-0.8), "hi": np.array(0.8)}, ["Y"]),
        Case("Clip min only", [node("Clip", ["X", "lo"])], {"X": x, "lo": np.array(-0.8)}, ["Y"]),
        Case("Clip max only", [node("Clip", ["X", "", "hi"])], {"X": x, "hi": np.array(0.8)}, ["Y"]),
        Case("Clip frozen bounds", [node("Clip", ["X", "lo", "hi"])], {"X": x, "lo": np.array(-0.8), "hi": np.array(0.8)},
             ["Y"], params=["X"]),
        Case("Clip no bounds", [node("Clip", ["X"])], {"X": x}, ["Y"]),
    ]


def _where() -> List[Case]:
    cond = np.array([[True, False, True], [False, False, True]])
    return [
        Case("Where", [node("Where", ["C", "A", "B"])], {"C": cond, "A": rand(2, 3), "B": rand(2, 3)}, ["Y"]),
        Case("Where broadcast", [node("Where", ["C", "A", "B"])], {"C": cond, "A": rand(3), "B": rand(2, 1)}, ["Y"]),
        Case("Where condition broadcast", [node("Where", ["C", "A", "B"])],
             {"C": np.array([True, False, True]), "A": rand(2, 1), "B": rand(2, 3)}, ["Y"]),
    ]


def _cast() -> List[Case]:
    x = rand(2, 3, lo=-2, hi=2)
    x[np.abs(x * 3 - np.round(x * 3)) < 0.05] += 0.1  # Cast to int64 is flat away from integers
    return [
        Case("Cast to float64", [node("Cast", ["X"], to=F64)], {"X": rand(2, 3)}, ["Y"]),
        # the integer cast is piecewise constant: no gradient flows through it, only through Mul's X
        Case("Cast to int64 not differentiated",
             [node("Mul", ["X", "three"], ["X3"]), node("Cast", ["X3"], ["I"], to=TensorProto.INT64),
              node("Cast", ["I"], ["F"], to=F64), node("Mul", ["X", "F"])],
             {"X": x, "three": np.array(3.0)}, ["Y"], params=["X"]),
    ]


def _castlike() -> List[Case]:
    return [Case("CastLike to float64", [node("CastLike", ["X", "T"])], {"X": rand(2, 3), "T": rand(1)}, ["Y"])]


def _reshape_like(op: str) -> List[Case]:
    if op == "Reshape":
        return [Case("Reshape", [node("Reshape", ["X", "S"])], {"X": rand(2, 6), "S": i64(3, -1, 2)}, ["Y"])]
    if op == "Flatten":
        return [Case("Flatten axis %d" % ax, [node("Flatten", ["X"], axis=ax)], {"X": rand(2, 3, 2)}, ["Y"]) for ax in (1, 0, -1)]
    if op == "Squeeze":
        return [Case("Squeeze axes", [node("Squeeze", ["X", "A"])], {"X": rand(2, 1, 3, 1), "A": i64(-1)}, ["Y"]),
                Case("Squeeze all", [node("Squeeze", ["X"])], {"X": rand(1, 3, 1)}, ["Y"]),
                Case("Squeeze opset11 attribute", [node("Squeeze", ["X"], axes=[0])], {"X": rand(1, 3, 2)}, ["Y"], opset=11)]
    return [Case("Unsqueeze", [node("Unsqueeze", ["X", "A"])], {"X": rand(2, 3), "A": i64(0, 3)}, ["Y"]),
            Case("Unsqueeze opset11 attribute", [node("Unsqueeze", ["X"], axes=[-1])], {"X": rand(2, 3)}, ["Y"], opset=11)]


def _expand() -> List[Case]:
    return [Case("Expand", [node("Expand", ["X", "S"])], {"X": rand(3, 1), "S": i64(2, 3, 4)}, ["Y"]),
            Case("Expand smaller shape", [node("Expand", ["X", "S"])], {"X": rand(2, 3), "S": i64(1, 1)}, ["Y"])]


def _identity() -> List[Case]:
    return unary("Identity", rand(2, 3))


def _layernorm() -> List[Case]:
    return [
        Case("LayerNormalization axis -1", [node("LayerNormalization", ["X", "S", "B"], axis=-1, epsilon=1e-3)],
             {"X": rand(2, 3, 4), "S": rand(4), "B": rand(4)}, ["Y"]),
        Case("LayerNormalization axis 1 no bias", [node("LayerNormalization", ["X", "S"], axis=1)],
             {"X": rand(2, 3, 4), "S": rand(3, 4)}, ["Y"]),
        Case("LayerNormalization axis 0", [node("LayerNormalization", ["X", "S", "B"], axis=0)],
             {"X": rand(2, 3), "S": rand(2, 3), "B": rand(2, 3)}, ["Y"]),
        Case("LayerNormalization Mean exposed", [node("LayerNormalization", ["X", "S", "B"], ["Y", "M"])],
             {"X": rand(2, 5), "S": rand(5), "B": rand(5)}, ["Y"]),
    ]


def _dropout() -> List[Case]:
    return [
        Case("Dropout ratio 0", [node("Dropout", ["X", "r"])], {"X": rand(2, 3), "r": np.array(0.0)}, ["Y"], params=["X"]),
        Case("Dropout ratio 0 mask exposed", [node("Dropout", ["X", "r"], ["Y", "M"])], {"X": rand(2, 3), "r": np.array(0.0)},
             ["Y"], params=["X"]),
    ]


def _log_softmax_ce() -> List[Case]:
    labels = i64(0, 2, 1, 2)
    cases = []
    for red in ("mean", "sum", "none"):
        cases.append(Case("SoftmaxCrossEntropyLoss %s" % red, [node("SoftmaxCrossEntropyLoss", ["S", "L"], reduction=red)],
                          {"S": rand(4, 3, lo=-2, hi=2), "L": labels}, ["Y"]))
    cases += [
        Case("SoftmaxCrossEntropyLoss weights ignore_index", [node("SoftmaxCrossEntropyLoss", ["S", "L", "W"], ignore_index=1)],
             {"S": rand(4, 3, lo=-2, hi=2), "L": labels, "W": np.array([0.5, 2.0, 1.5])}, ["Y"], params=["S"]),
        Case("SoftmaxCrossEntropyLoss N,C,d weights ignore_index none",
             [node("SoftmaxCrossEntropyLoss", ["S", "L", "W"], reduction="none", ignore_index=0)],
             {"S": rand(2, 3, 2, lo=-2, hi=2), "L": np.array([[0, 2], [1, 2]], dtype=np.int64), "W": np.array([0.5, 2.0, 1.5])},
             ["Y"], params=["S"]),
        Case("SoftmaxCrossEntropyLoss negative ignore_index", [node("SoftmaxCrossEntropyLoss", ["S", "L"], ignore_index=-100)],
             {"S": rand(3, 4, lo=-2, hi=2), "L": i64(3, -100, 0)}, ["Y"]),
        Case("SoftmaxCrossEntropyLoss N,C,d", [node("SoftmaxCrossEntropyLoss", ["S", "L"], ["Y", "LP"], reduction="sum")],
             {"S": rand(2, 3, 2, lo=-2, hi=2), "L": np.array([[0, 2], [1, 1]], dtype=np.int64)}, ["Y"]),
    ]
    return cases


def _nll_loss() -> List[Case]:
    labels = i64(0, 2, 1, 2)
    cases = [Case("NegativeLogLikelihoodLoss %s" % red, [node("NegativeLogLikelihoodLoss", ["S", "L"], reduction=red)],
                  {"S": rand(4, 3), "L": labels}, ["Y"]) for red in ("mean", "sum", "none")]
    cases += [
        Case("NegativeLogLikelihoodLoss weights ignore_index", [node("NegativeLogLikelihoodLoss", ["S", "L", "W"], ignore_index=1)],
             {"S": rand(4, 3), "L": labels, "W": np.array([0.5, 2.0, 1.5])}, ["Y"], params=["S"]),
        Case("NegativeLogLikelihoodLoss N,C,d", [node("NegativeLogLikelihoodLoss", ["S", "L", "W"], reduction="mean")],
             {"S": rand(2, 3, 2), "L": np.array([[0, 2], [1, 2]], dtype=np.int64), "W": np.array([0.5, 2.0, 1.5])},
             ["Y"], params=["S"]),
    ]
    return cases


def _batchnorm_oracle(eps: float):
    def f(v: Dict[str, np.ndarray]) -> float:
        x = v["X"]
        axes = (0,) + tuple(range(2, x.ndim))
        shape = [1, -1] + [1] * (x.ndim - 2)
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased, as training mode uses
        y = (x - mean) / np.sqrt(var + eps) * v["S"].reshape(shape) + v["B"].reshape(shape)
        return float(np.sum(y * v["R0"]))
    return f


def _batchnorm() -> List[Case]:
    return [
        Case("BatchNormalization NCHW", [node("BatchNormalization", ["X", "S", "B", "M", "V"], epsilon=1e-3)],
             {"X": rand(3, 2, 2, 2), "S": rand(2), "B": rand(2), "M": rand(2), "V": rand(2, lo=0.5, hi=2)}, ["Y"],
             params=["X", "S", "B"], oracle=_batchnorm_oracle(1e-3)),
        Case("BatchNormalization NCL momentum", [node("BatchNormalization", ["X", "S", "B", "M", "V"], momentum=0.7)],
             {"X": rand(3, 2, 3), "S": rand(2), "B": rand(2), "M": rand(2), "V": rand(2, lo=0.5, hi=2)}, ["Y"],
             params=["X", "S", "B"], oracle=_batchnorm_oracle(1e-5)),
        Case("BatchNormalization NC", [node("BatchNormalization", ["X", "S", "B", "M", "V"])],
             {"X": rand(4, 3), "S": rand(3), "B": rand(3), "M": rand(3), "V": rand(3, lo=0.5, hi=2)}, ["Y"],
             params=["X", "S", "B"], oracle=_batchnorm_oracle(1e-5)),
    ]


CASES: Dict[str, Callable[[], List[Case]]] = {
    "Abs": lambda: unary("Abs", away(2, 3)),
    "Add": lambda: binary("Add", rand),
    "AveragePool": _avgpool,
    "Cast": _cast,
    "CastLike": _castlike,
    "Clip": _clip,
    "Concat": _concat,
    "Conv": _conv,
    "Div": lambda: binary("Div", lambda *s: away(*s, gap=0.5, scale=2.0)),
    "Dropout": _dropout,
    "Erf": lambda: unary("Erf", rand(2, 3, lo=-2, hi=2)),
    "Exp": lambda: unary("Exp", rand(2, 3)),
    "Expand": _expand,
    "Flatten": lambda: _reshape_like("Flatten"),
    "Gather": _gather,
    "Gelu": lambda: [Case("Gelu %s" % a, [node("Gelu", ["X"], approximate=a)], {"X": rand(2, 3, lo=-3, hi=3)}, ["Y"], opset=20)
                     for a in ("none", "tanh")],
    # the training model's fused tanh-GELU (pytrain.autodiff.gelu_forms), at an opset before ONNX's Gelu
    "ai.pytrain.Gelu": lambda: [Case("ai.pytrain.Gelu", [node("Gelu", ["X"], domain="ai.pytrain", approximate="tanh")],
                                     {"X": rand(2, 3, lo=-3, hi=3)}, ["Y"], opset=17)],
    "Gemm": _gemm,
    "GlobalAveragePool": _global_avgpool,
    "Identity": _identity,
    "LayerNormalization": _layernorm,
    "LeakyRelu": lambda: unary("LeakyRelu", away(2, 3), alpha=0.2) + unary("LeakyRelu", away(3)),
    "Log": lambda: unary("Log", rand(2, 3, lo=0.5, hi=2.0)),
    "LogSoftmax": lambda: _softmax("LogSoftmax"),
    "MatMul": _matmul,
    "MaxPool": _maxpool,
    "Mean": lambda: _sum_mean("Mean"),
    "Mul": lambda: binary("Mul", rand),
    "Neg": lambda: unary("Neg", rand(2, 3)),
    "NegativeLogLikelihoodLoss": _nll_loss,
    "Pow": _pow,
    "Reciprocal": lambda: unary("Reciprocal", away(2, 3, gap=0.5, scale=2.0)),
    "ReduceMax": lambda: _reduce("ReduceMax", _distinct),
    "ReduceMean": lambda: _reduce("ReduceMean"),
    "ReduceMin": lambda: _reduce("ReduceMin", _distinct),
    "ReduceSum": lambda: _reduce("ReduceSum"),
    "Relu": lambda: unary("Relu", away(3, 4)),
    "Reshape": lambda: _reshape_like("Reshape"),
    "Sigmoid": lambda: unary("Sigmoid", rand(2, 3, lo=-3, hi=3)),
    "Slice": _slice,
    "Softmax": lambda: _softmax("Softmax"),
    "SoftmaxCrossEntropyLoss": _log_softmax_ce,
    "Softplus": lambda: unary("Softplus", rand(2, 3, lo=-3, hi=3)),
    "Split": _split,
    "Sqrt": lambda: unary("Sqrt", rand(2, 3, lo=0.5, hi=2.0)),
    "Squeeze": lambda: _reshape_like("Squeeze"),
    "Sub": lambda: binary("Sub", rand),
    "Sum": lambda: _sum_mean("Sum"),
    "Tanh": lambda: unary("Tanh", rand(2, 3, lo=-2, hi=2)),
    "Transpose": _transpose,
    "Unsqueeze": lambda: _reshape_like("Unsqueeze"),
    "Where": _where,
    "ai.pytrain.BatchNormTraining": _batchnorm,
}


@functools.lru_cache(maxsize=None)
def _all_cases() -> Dict[str, Callable[[], List[Case]]]:
    """CASES of this module and of every tests/test_rules_<family>.py module."""
    cases = dict(CASES)
    for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "test_rules_*.py"))):
        family = importlib.import_module(os.path.basename(path)[:-3]).CASES
        assert not set(family) & set(cases), "two modules test the rules of %s" % sorted(set(family) & set(cases))
        cases.update(family)
    return cases


def test_every_rule_has_a_case():
    assert sorted(_all_cases()) == differentiable_ops()


@pytest.mark.parametrize("op", sorted(_all_cases()))
def test_rule(op):
    cases = _all_cases()[op]()
    assert cases
    for case in cases:
        check(case)


# ---- the engine: accumulation, dead parameters, integer paths, frozen parameters ----------------
def test_tensor_used_twice_accumulates():
    x, w = rand(2, 3), rand(3)
    nodes = [node("Mul", ["X", "X"], ["sq"]),                     # the same tensor twice in one node
             node("Sigmoid", ["X"], ["s"]),                        # ... and fanned out to other nodes
             node("Mul", ["s", "W"], ["sw"]),
             node("Concat", ["sq", "X", "sw"], ["cat"], axis=0),
             node("Add", ["cat", "W"], ["Y"])]                     # W also used twice
    check(Case("accumulation", nodes, {"X": x, "W": w}, ["Y", "s"]))


def test_parameter_not_reaching_the_loss_gets_zero_gradient():
    nodes = [node("Tanh", ["X"], ["Y"]), node("Mul", ["D", "D"], ["unused"])]
    d = rand(4)
    d[1:3] = [np.inf, -np.inf]  # e.g. a mask buffer: its zero gradient must not turn into NaN
    model = with_loss(Case("dead", nodes, {"X": rand(2, 3), "D": d}, ["Y"]))
    grads = train_grads(model, ["X", "D"])
    np.testing.assert_array_equal(grads["D"], np.zeros(4))
    assert grads["D"].dtype == np.float64
    x = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "X"))
    r = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "R0"))
    np.testing.assert_allclose(grads["X"], r * (1 - np.tanh(x) ** 2), rtol=1e-12)


def test_integer_shape_paths_are_not_differentiated():
    # X is reshaped to the shape of W (Shape -> Gather -> Concat -> Reshape: int64 all the way);
    # W only reaches the loss through Shape, so its gradient is exactly zero.
    nodes = [node("Shape", ["W"], ["ws"]),
             node("Gather", ["ws", "zero"], ["w0"], axis=0),
             node("Concat", ["w0", "minus1"], ["target_shape"], axis=0),
             node("Reshape", ["X", "target_shape"], ["Xr"]),
             node("Cast", ["ws"], ["wsf"], to=F64),                   # float again, but from an int path
             node("ReduceSum", ["wsf"], ["nelem"], keepdims=1),
             node("Mul", ["Xr", "nelem"], ["Y"])]
    case = Case("shape path", nodes, {"X": rand(2, 6), "W": rand(3, 5), "zero": i64(0), "minus1": i64(-1)}, ["Y"])
    check(case)
    model = with_loss(case)
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["X", "W"], loss=None)
    train = onnx.load_from_string(arts.training_model)
    backward = [n.op_type for n in train.graph.node if n.name.startswith("grad/") or n.output[0].startswith("grad/")]
    assert backward, "no gradient nodes found"
    # nothing flows back into Gather/Concat/Cast/ReduceSum of the int64 path: the only reduction
    # differentiated is the loss's own ReduceSum
    assert "GatherGrad" not in backward and "ConcatGrad" not in backward
    assert backward.count("ReduceGrad") == 1, backward
    grads = train_grads(model, ["X", "W"])
    np.testing.assert_array_equal(grads["W"], np.zeros((3, 5)))


def test_frozen_parameters_get_no_gradient():
    w1, b1, w2 = rand(3, 4), rand(4), rand(4, 2)
    nodes = [node("MatMul", ["X", "W1"], ["h"]), node("Add", ["h", "B1"], ["h1"]), node("Tanh", ["h1"], ["t"]),
             node("MatMul", ["t", "W2"], ["Y"])]
    case = Case("frozen", nodes, {"X": rand(2, 3), "W1": w1, "B1": b1, "W2": w2}, ["Y"])
    model = with_loss(case)
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=None, frozen_params=["W1", "B1"],
                                        loss=None)
    outs = [o.name for o in onnx.load_from_string(arts.training_model).graph.output]
    assert "W2_grad" in outs and "X_grad" in outs
    assert "W1_grad" not in outs and "B1_grad" not in outs
    assert not any(n.endswith("_grad") and n[:-5] in ("W1", "B1") for n in outs)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    Module(arts.training_model, state, arts.eval_model)()
    for p in ("W1", "B1"):
        assert state.parameters[p].grad is None
        assert not state.parameters[p].requires_grad
    full = fd_grads(Case("frozen", nodes, dict(case.inits), ["Y"], params=["X", "W2"]), model)
    np.testing.assert_allclose(state.parameters["W2"].grad, full["W2"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(state.parameters["X"].grad, full["X"], rtol=RTOL, atol=ATOL)


def test_dropout_random_mask_gradient():
    """Dropout with ratio 0.4 in training mode: dX = dY * mask / (1 - ratio), the mask the step drew."""
    x = rand(4, 5)
    case = Case("dropout", [node("Dropout", ["X", "r"], ["Y", "M"])], {"X": x, "r": np.array(0.4)}, ["Y"], params=["X"])
    model = with_loss(case)
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["X"], loss=None,
                                        additional_output_names=["M"])
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss, mask = Module(arts.training_model, state, seed=3)()
    assert mask.dtype == np.bool_ and 0 < mask.sum() < mask.size
    r = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "R0"))
    np.testing.assert_allclose(state.parameters["X"].grad, r * mask / 0.6, rtol=1e-12)
    np.testing.assert_allclose(loss, np.sum(x * mask / 0.6 * r), rtol=1e-12)


def test_pow_exponent_of_another_type_gets_its_own_type():
    """Pow(float32 base, float64 exponent): each gradient has its parameter's type."""
    case = Case("pow mixed", [node("Pow", ["A", "P"])],
                {"A": rand(2, 3, lo=0.5, hi=2).astype(np.float32), "P": rand(3, lo=-1, hi=2)}, ["Y"], params=["A", "P"])
    model = with_loss(case)
    for t in model.graph.initializer:  # the loss weights in the output's type
        if t.name == "R0":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), "R0"))
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["A", "P"], loss=None)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    train = ModelProto.FromString(arts.training_model)
    plan = Plan(train.graph, ["A", "P"], ["A_grad", "P_grad"], opset=17, training=True)
    da, dp = plan.run([state.parameters["A"].data, state.parameters["P"].data])
    assert da.dtype == np.float32 and dp.dtype == np.float64
    a, pw = case.inits["A"].astype(np.float64), case.inits["P"]
    r = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "R0")).astype(np.float64)
    np.testing.assert_allclose(dp, np.sum(r * a ** pw * np.log(a), axis=0), rtol=1e-5)
    np.testing.assert_allclose(da, r * pw * a ** (pw - 1), rtol=1e-5)


def test_rank0_parameter_keeps_its_shape():
    case = Case("rank 0", [node("Mul", ["A", "B"])], {"A": np.array(0.3), "B": rand(2, 3)}, ["Y"])
    arts = artifacts.generate_artifacts(with_loss(case).SerializeToString(), requires_grad=["A", "B"], loss=None)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    assert state.parameters["A"].data.shape == ()
    Module(arts.training_model, state)()
    assert state.parameters["A"].grad.shape == ()


# ---- errors -------------------------------------------------------------------------------------
def _without_rule() -> List[tuple]:
    """(op, domain, node inputs, initializers, attrs) of ops that run but have no gradient rule."""
    candidates = [
        ("Tile", "", ["X", "reps"], {"reps": i64(2, 1)}, {}),
        ("Pad", "", ["X", "pads"], {"pads": i64(0, 1, 0, 1)}, {}),
        ("Max", "", ["X", "K"], {"K": rand(3)}, {}),
        ("ReduceProd", "", ["X"], {}, {"keepdims": 0}),
        ("ReluGrad", "ai.pytrain", ["X", "X"], {}, {}),  # a gradient kernel never gets a rule
    ]
    return [c for c in candidates if get_rule(c[0], c[1]) is None]


@pytest.mark.parametrize("op,domain,inputs,extra,attrs", _without_rule(), ids=[c[0] for c in _without_rule()])
def test_op_without_rule_on_the_loss_path_raises(op, domain, inputs, extra, attrs):
    nodes = [node("Tanh", ["P"], ["X"]),
             helper.make_node(op, inputs, ["Z"], name="the_culprit", domain=domain, **attrs),
             node("ReduceSum", ["Z"], ["loss"], keepdims=0)]
    inits = {"P": rand(2, 3), **extra}
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("loss", 0, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=imports, ir_version=8)
    with pytest.raises(UnsupportedOpError) as err:
        artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["P"], loss=None)
    msg = str(err.value)
    assert "the_culprit" in msg and op in msg and "gradient" in msg
    assert "Gemm" in msg and "Conv" in msg  # it lists the ops that do have rules

    # off the loss path (fed by nothing trainable) the same op is fine
    nodes[0] = node("Identity", ["C"], ["X"])
    graph = helper.make_graph(nodes + [node("Mul", ["P", "P"], ["pp"]), node("ReduceSum", ["pp"], ["l2"], keepdims=0),
                                       node("Add", ["loss", "l2"], ["total"])],
                              "g", [], [helper.make_tensor_value_info("total", 0, None)],
                              [numpy_helper.from_array(v, k) for k, v in dict(inits, C=rand(2, 3)).items()])
    model = helper.make_model(graph, opset_imports=imports, ir_version=8)
    grads = train_grads(model, ["P"])
    np.testing.assert_allclose(grads["P"], 2 * inits["P"])


def test_unsupported_op_at_generation_time_names_op_and_node():
    nodes = [node("Tanh", ["P"], ["X"]), helper.make_node("Det", ["X"], ["Z"], name="mystery"),
             node("Identity", ["Z"], ["loss"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("loss", 0, None)],
                              [numpy_helper.from_array(rand(2, 3), "P")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(UnsupportedOpError) as err:
        artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["P"], loss=None)
    msg = str(err.value)
    assert "Det" in msg and "mystery" in msg
    assert "Gemm" in msg and "MatMul" in msg  # the supported ops are listed


# ---- layers against torch.autograd (float32) ---------------------------------------------------
try:
    import torch
    TF = torch.nn.functional
except ImportError:  # the rule tests above need no torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
F32 = TensorProto.FLOAT


def f32_model(nodes, inputs: Dict[str, tuple], inits: Dict[str, np.ndarray], out: str, out_shape, opset: int = 17):
    graph = helper.make_graph(
        list(nodes), "layer", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(out, F32, list(out_shape))],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()


def run_step(model: bytes, loss, feeds: Sequence[np.ndarray], params: Optional[Sequence[str]] = None):
    arts = artifacts.generate_artifacts(model, requires_grad=params, loss=loss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    value = float(Module(arts.training_model, state, arts.eval_model)(*feeds))
    return value, state


def torch_grads(fn, tensors: Dict[str, np.ndarray]):
    ts = {k: torch.tensor(v, requires_grad=v.dtype.kind == "f") for k, v in tensors.items()}
    loss = fn(ts)
    loss.backward()
    return float(loss.detach()), {k: t.grad.numpy() for k, t in ts.items() if t.grad is not None}


def compare(loss, state, ref_loss, ref_grads, rtol=1e-4, atol=1e-6):
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, ref_loss, rtol=rtol, atol=atol)
    for name, g in ref_grads.items():
        got = state.parameters[name].grad
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, g, rtol=rtol, atol=atol, err_msg=name)


@needs_torch
def test_torch_mlp_gemm_relu_cross_entropy():
    p = {"W1": f32(5, 4), "B1": f32(5), "W2": f32(3, 5), "B2": f32(3)}
    x, y = f32(6, 4), np.array([0, 2, 1, 1, 0, 2], dtype=np.int64)
    nodes = [node("Gemm", ["X", "W1", "B1"], ["h"], transB=1), node("Relu", ["h"], ["r"]),
             node("Gemm", ["r", "W2", "B2"], ["logits"], transB=1)]
    model = f32_model(nodes, {"X": (F32, ["N", 4])}, p, "logits", ["N", 3])
    loss, state = run_step(model, artifacts.LossType.CrossEntropyLoss, [x, y])
    ref_loss, ref = torch_grads(lambda t: TF.cross_entropy(
        TF.linear(torch.relu(TF.linear(torch.tensor(x), t["W1"], t["B1"])), t["W2"], t["B2"]), torch.tensor(y)), p)
    compare(loss, state, ref_loss, ref)


@needs_torch
def test_torch_conv_maxpool_mse():
    p = {"W": f32(3, 1, 3, 3), "B": f32(3), "Wf": f32(2, 27), "Bf": f32(2)}
    x, target = f32(2, 1, 6, 6), f32(2, 2)
    nodes = [node("Conv", ["X", "W", "B"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["r"]),
             node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]), node("Flatten", ["m"], ["f"]),
             node("Gemm", ["f", "Wf", "Bf"], ["out"], transB=1)]
    model = f32_model(nodes, {"X": (F32, ["N", 1, 6, 6])}, p, "out", ["N", 2])
    loss, state = run_step(model, artifacts.LossType.MSELoss, [x, target])

    def fn(t):
        h = TF.max_pool2d(torch.relu(TF.conv2d(torch.tensor(x), t["W"], t["B"], padding=1)), 2)
        return TF.mse_loss(TF.linear(torch.flatten(h, 1), t["Wf"], t["Bf"]), torch.tensor(target))
    compare(loss, state, *torch_grads(fn, p))


@needs_torch
@pytest.mark.parametrize("axis", [-1, 1])
def test_torch_layer_norm_l1(axis):
    norm_shape = (4, 5) if axis == 1 else (5,)
    p = {"S": f32(*norm_shape) + 1, "Bn": f32(*norm_shape), "Wm": f32(5, 2)}
    x, target = f32(3, 4, 5), f32(3, 4, 2)
    nodes = [node("LayerNormalization", ["X", "S", "Bn"], ["n"], axis=axis, epsilon=1e-5),
             node("MatMul", ["n", "Wm"], ["out"])]
    model = f32_model(nodes, {"X": (F32, [3, 4, 5])}, p, "out", [3, 4, 2])
    loss, state = run_step(model, artifacts.LossType.L1Loss, [x, target])

    def fn(t):
        return TF.l1_loss(TF.layer_norm(torch.tensor(x), norm_shape, t["S"], t["Bn"], 1e-5) @ t["Wm"],
                          torch.tensor(target))
    compare(loss, state, *torch_grads(fn, p))


@needs_torch
def test_torch_embedding_weighted_cross_entropy_ignore_index():
    p = {"E": f32(10, 6), "Wc": f32(3, 6), "Bc": f32(3)}
    tokens = np.array([[1, 4, 4], [9, 0, 1], [4, 4, 4], [2, 3, 7]], dtype=np.int64)
    y = np.array([2, 1, 0, 1], dtype=np.int64)
    weight = [0.3, 1.0, 2.5]
    nodes = [node("Gather", ["E", "T"], ["e"]), node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0),
             node("Gemm", ["m", "Wc", "Bc"], ["logits"], transB=1)]
    model = f32_model(nodes, {"T": (TensorProto.INT64, [4, 3])}, p, "logits", [4, 3])
    loss, state = run_step(model, losses.CrossEntropyLoss(weight=weight, ignore_index=1), [tokens, y])

    def fn(t):
        logits = TF.linear(TF.embedding(torch.tensor(tokens), t["E"]).mean(1), t["Wc"], t["Bc"])
        return TF.cross_entropy(logits, torch.tensor(y), weight=torch.tensor(weight), ignore_index=1)
    compare(loss, state, *torch_grads(fn, p))
    assert np.all(state.parameters["E"].grad[[5, 6, 8]] == 0)  # rows no token picked
    assert np.all(state.parameters["E"].grad[[9, 0]] == 0)      # only in the ignored sample


@needs_torch
def test_torch_batch_norm_training():
    p = {"X": f32(4, 3, 2, 2), "S": f32(3) + 1, "Bb": f32(3), "M": f32(3), "V": np.abs(f32(3)) + 0.5}
    target = f32(4, 3, 2, 2)
    nodes = [node("BatchNormalization", ["X", "S", "Bb", "M", "V"], ["out"], epsilon=1e-3, momentum=0.8)]
    model = f32_model(nodes, {}, p, "out", [4, 3, 2, 2])
    loss, state = run_step(model, artifacts.LossType.MSELoss, [target], params=["X", "S", "Bb"])
    rm, rv = torch.tensor(p["M"]), torch.tensor(p["V"])

    def fn(t):
        out = TF.batch_norm(t["X"], rm, rv, t["S"], t["Bb"], training=True, momentum=0.2, eps=1e-3)
        return TF.mse_loss(out, torch.tensor(target))
    ref_loss, ref = torch_grads(fn, {k: p[k] for k in ("X", "S", "Bb")})
    compare(loss, state, ref_loss, ref)
    # the running statistics move as torch's do (ONNX momentum 0.8 == torch momentum 0.2)
    np.testing.assert_allclose(state.parameters["M"].data, rm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.parameters["V"].data, rv.numpy(), rtol=1e-5, atol=1e-6)


# ---- the built-in losses against torch -----------------------------------------------------------
def _logits_model(shape: Sequence[int]) -> bytes:
    return f32_model([node("Identity", ["P"], ["out"])], {}, {"P": np.zeros(shape, np.float32)}, "out", shape)


def _loss_step(loss, logits: np.ndarray, labels: np.ndarray):
    model = _logits_model(logits.shape)
    arts = artifacts.generate_artifacts(model, requires_grad=["P"], loss=loss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    state.parameters["P"].data[...] = logits
    value = float(Module(arts.training_model, state)(labels))
    return value, state.parameters["P"].grad


LOSS_CASES = {
    "mse mean": (lambda: artifacts.LossType.MSELoss, lambda x, y: TF.mse_loss(x, y), "float"),
    "mse sum": (lambda: losses.MSELoss("sum"), lambda x, y: TF.mse_loss(x, y, reduction="sum"),
                "float"),
    "l1 mean": (lambda: artifacts.LossType.L1Loss, lambda x, y: TF.l1_loss(x, y), "float"),
    "bce mean": (lambda: artifacts.LossType.BCEWithLogitsLoss, lambda x, y: TF.binary_cross_entropy_with_logits(x, y),
                 "prob"),
    "bce pos_weight sum": (lambda: losses.BCEWithLogitsLoss("sum", pos_weight=[0.5, 2.0, 3.0]),
                           lambda x, y: TF.binary_cross_entropy_with_logits(
                               x, y, reduction="sum", pos_weight=torch.tensor([0.5, 2.0, 3.0])), "prob"),
    "ce mean": (lambda: artifacts.LossType.CrossEntropyLoss, lambda x, y: TF.cross_entropy(x, y), "class"),
    "ce weight ignore sum": (lambda: losses.CrossEntropyLoss(
        weight=[1.0, 0.2, 3.0], reduction="sum", ignore_index=2),
        lambda x, y: TF.cross_entropy(x, y, weight=torch.tensor([1.0, 0.2, 3.0]), reduction="sum", ignore_index=2),
        "class"),
    "ce weight ignore mean": (lambda: losses.CrossEntropyLoss(
        weight=[1.0, 0.2, 3.0], ignore_index=0),
        lambda x, y: TF.cross_entropy(x, y, weight=torch.tensor([1.0, 0.2, 3.0]), ignore_index=0), "class"),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(LOSS_CASES))
def test_loss_against_torch(name):
    make_loss, ref_fn, kind = LOSS_CASES[name]
    x = f32(5, 3, scale=2.0)
    if kind == "float":
        y = f32(5, 3)
        x[np.abs(x - y) < 0.05] += 0.2  # L1 away from its kink
    elif kind == "prob":
        y = np.array(RNG.uniform(0, 1, (5, 3)), dtype=np.float32)
        y[0] = [0.0, 1.0, 1.0]
    else:
        y = np.array([0, 2, 1, 2, 0], dtype=np.int64)
    loss, grad = _loss_step(make_loss(), x, y)
    xt = torch.tensor(x, requires_grad=True)
    ref = ref_fn(xt, torch.tensor(y))
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-5, atol=1e-7)


@needs_torch
def test_cross_entropy_spatial_against_torch():
    x = f32(2, 3, 2, 2)
    y = np.array([[[0, 2], [1, 1]], [[2, 2], [0, 1]]], dtype=np.int64)
    loss, grad = _loss_step(losses.CrossEntropyLoss(weight=[0.5, 1.0, 2.0], ignore_index=1), x, y)
    xt = torch.tensor(x, requires_grad=True)
    ref = TF.cross_entropy(xt, torch.tensor(y), weight=torch.tensor([0.5, 1.0, 2.0]), ignore_index=1)
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_bce_with_huge_logits_is_finite():
    x = np.array([[1000.0, -1000.0, 1000.0, -1000.0, 0.5]], dtype=np.float32)
    y = np.array([[1.0, 0.0, 0.0, 1.0, 1.0]], dtype=np.float32)
    loss, grad = _loss_step(artifacts.LossType.BCEWithLogitsLoss, x, y)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    expected = (np.array([1.0, 0.0, 1.0, 0.0, 1 / (1 + np.exp(-0.5))]) - y[0]) / x.size   # (sigmoid(x) - y) / N
    np.testing.assert_allclose(grad[0], expected, rtol=1e-6, atol=1e-7)
    # the confident right answers cost nothing, the confident wrong ones cost 1000 each
    np.testing.assert_allclose(loss, (2000.0 + np.log1p(np.exp(-0.5))) / x.size, rtol=1e-6)


def test_two_parameters_sharing_one_gradient_tensor():
    """y = A + B: both gradients are the same tensor; each still gets its own output."""
    a, b = rand(2, 3), rand(2, 3)
    case = Case("shared", [node("Add", ["A", "B"])], {"A": a, "B": b}, ["Y"])
    model = with_loss(case)
    grads = train_grads(model, ["A", "B"])
    np.testing.assert_allclose(grads["A"], grads["B"])
    assert np.abs(grads["A"]).sum() > 0
