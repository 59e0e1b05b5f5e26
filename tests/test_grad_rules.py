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

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gradcheck import numeric_grad
from pytrain import artifacts
from pytrain.api import CheckpointState, Module
from pytrain.autodiff import differentiable_ops
from pytrain.errors import UnsupportedOpError
from pytrain.executor import Plan

F64 = TensorProto.DOUBLE
EPS = 1e-6
RTOL, ATOL = 1e-6, 1e-8


# ---- the harness --------------------------------------------------------------------------------
class Case:
    """One small model: ``nodes`` over initializers ``inits``; the loss is built on ``outs``.

    params: the initializers whose gradients are checked (default: every float64 one).
    oracle: optional ``f(values: dict) -> float`` replacing the forward model in the finite
        differences (for training-mode semantics the inference forward does not have).
    """

    def __init__(self, name: str, nodes: Sequence[onnx.NodeProto], inits: Dict[str, np.ndarray],
                 outs: Sequence[str], opset: int = 17, params: Optional[Sequence[str]] = None,
                 oracle: Optional[Callable[[Dict[str, np.ndarray]], float]] = None) -> None:
        self.name = name
        self.nodes = list(nodes)
        self.inits = dict(inits)
        self.outs = list(outs)
        self.opset = opset
        self.params = list(params) if params is not None else [
            k for k, v in self.inits.items() if v.dtype == np.float64]
        self.oracle = oracle


def _model(nodes, inits: Dict[str, np.ndarray], outputs: Sequence[str], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes), "case", [], [helper.make_tensor_value_info(o, 0, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _forward(model: onnx.ModelProto, feeds: Sequence[str], outputs: Sequence[str], opset: int) -> Plan:
    from pytrain.proto import ModelProto
    m = ModelProto.FromString(model.SerializeToString())
    return Plan(m.graph, list(feeds), list(outputs), opset=opset)


def with_loss(case: Case, seed: int = 0) -> onnx.ModelProto:
    """The case's model with loss = sum_k ReduceSum(Mul(out_k, R_k)) as its only output."""
    probe = _forward(_model(case.nodes, case.inits, case.outs, case.opset), [], case.outs, case.opset)
    values = probe.run([])
    rng = np.random.default_rng(seed)
    nodes, inits, terms = list(case.nodes), dict(case.inits), []
    for k, (name, v) in enumerate(zip(case.outs, values)):
        r = "R%d" % k
        inits[r] = rng.standard_normal(np.shape(v))
        nodes.append(helper.make_node("Mul", [name, r], ["weighted%d" % k]))
        nodes.append(helper.make_node("ReduceSum", ["weighted%d" % k], ["term%d" % k], keepdims=0))
        terms.append("term%d" % k)
    nodes.append(helper.make_node("Sum", terms, ["total_loss"]))
    return _model(nodes, inits, ["total_loss"], case.opset)


def train_grads(model: onnx.ModelProto, params: Sequence[str], **kwargs) -> Dict[str, np.ndarray]:
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=list(params), loss=None,
                                        optimizer=artifacts.OptimType.SGD, **kwargs)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    module()
    # a rank-0 parameter comes back from the checkpoint as shape (1,) (see test_rank0_parameter_shape)
    return {p: state.parameters[p].grad.reshape(np.shape(numpy_helper.to_array(
        next(t for t in model.graph.initializer if t.name == p)))) for p in params}


def fd_grads(case: Case, model: onnx.ModelProto) -> Dict[str, np.ndarray]:
    values = {k: np.asarray(v) for k, v in case.inits.items()}
    values.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    if case.oracle is not None:
        def f(*xs):
            return case.oracle(dict(values, **dict(zip(case.params, xs))))
    else:
        plan = _forward(model, case.params, ["total_loss"], case.opset)

        def f(*xs):
            return float(plan.run(list(xs))[0])
    xs = [values[p] for p in case.params]
    return {p: numeric_grad(f, xs, i, EPS) for i, p in enumerate(case.params)}


def check(case: Case) -> None:
    model = with_loss(case)
    got = train_grads(model, case.params)
    want = fd_grads(case, model)
    for p in case.params:
        assert got[p].shape == want[p].shape, (case.name, p)
        assert got[p].dtype == np.float64, (case.name, p, got[p].dtype)
        np.testing.assert_allclose(got[p], want[p], rtol=RTOL, atol=ATOL, err_msg="%s: d/d%s" % (case.name, p))


# ---- the cases, one builder per op (each returns a list of Case) --------------------------------
RNG = np.random.default_rng(1234)


def rand(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float64)


def away(*shape: int, gap: float = 0.2, scale: float = 1.0) -> np.ndarray:
    """Random values whose magnitude is at least ``gap`` (away from the kink at 0)."""
    v = RNG.uniform(gap, scale, shape) * RNG.choice([-1.0, 1.0], shape)
    return v.astype(np.float64)


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def node(op: str, inputs: Sequence[str], outputs: Sequence[str] = ("Y",), **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=op.lower() + "_node", **attrs)


def unary(op: str, x: np.ndarray, **attrs) -> List[Case]:
    return [Case(op, [node(op, ["X"], **attrs)], {"X": x}, ["Y"])]


def binary(op: str, make: Callable[..., np.ndarray]) -> List[Case]:
    shapes = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((), (2, 3)), ((1, 3), (2, 1))]
    return [Case("%s %s %s" % (op, a, b), [node(op, ["A", "B"])], {"A": make(*a), "B": make(*b)}, ["Y"])
            for a, b in shapes]


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
    return [
        Case("Clip min max", [node("Clip", ["X", "lo", "hi"])], {"X": x, "lo": np.array(-0.8), "hi": np.array(0.8)}, ["Y"],
             params=["X"]),
        Case("Clip min only", [node("Clip", ["X", "lo"])], {"X": x, "lo": np.array(-0.8)}, ["Y"], params=["X"]),
        Case("Clip max only", [node("Clip", ["X", "", "hi"])], {"X": x, "hi": np.array(0.8)}, ["Y"], params=["X"]),
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
                Case("Squeeze all", [node("Squeeze", ["X"])], {"X": rand(1, 3, 1)}, ["Y"])]
    return [Case("Unsqueeze", [node("Unsqueeze", ["X", "A"])], {"X": rand(2, 3), "A": i64(0, 3)}, ["Y"])]


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


def test_every_rule_has_a_case():
    assert sorted(CASES) == differentiable_ops()


@pytest.mark.parametrize("op", differentiable_ops())
def test_rule(op):
    assert op in CASES, "gradient rule for %s has no test case in CASES" % op
    cases = CASES[op]()
    assert cases
    for case in cases:
        check(case)
