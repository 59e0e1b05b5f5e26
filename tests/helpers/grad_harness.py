"""The gradient-rule harness: a tiny float64 model per case, one train step through
``generate_artifacts``, and central finite differences of the same scalar as the oracle.

Each ``tests/test_rules_*.py`` (and ``test_grad_rules.py``) defines ``CASES``: op -> builder of
``Case`` lists; ``test_grad_rules.test_rule`` runs them all, and ``test_every_rule_has_a_case`` checks
that together they cover every rule in ``pytrain.autodiff.differentiable_ops()``. tests/conftest.py
reseeds ``RNG`` for each test.
"""
from __future__ import annotations

import zlib
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gradcheck import numeric_grad
from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module
from pytrain.engine.executor import Plan
from pytrain.proto import ModelProto

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
    return {p: state.parameters[p].grad for p in params}


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


def reseed(test_name: str) -> None:
    """Make RNG draw the same data for a test whatever ran before it (or was deselected)."""
    RNG.bit_generator.state = np.random.default_rng(zlib.crc32(test_name.encode())).bit_generator.state


def rand(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float64)


def away(*shape: int, gap: float = 0.2, scale: float = 1.0) -> np.ndarray:
    """Random values whose magnitude is at least ``gap`` (away from the kink at 0)."""
    v = RNG.uniform(gap, scale, shape) * RNG.choice([-1.0, 1.0], shape)
    return v.astype(np.float64)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    """Standard normal float32 values from RNG (for checks against torch in float32)."""
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def node(op: str, inputs: Sequence[str], outputs: Sequence[str] = ("Y",), **attrs) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name="%s_%s" % (op.lower(), outputs[0]), **attrs)


def unary(op: str, x: np.ndarray, **attrs) -> List[Case]:
    return [Case(op, [node(op, ["X"], **attrs)], {"X": x}, ["Y"])]


def binary(op: str, make: Callable[..., np.ndarray]) -> List[Case]:
    shapes = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((), (2, 3)), ((1, 3), (2, 1))]
    return [Case("%s %s %s" % (op, a, b), [node(op, ["A", "B"])], {"A": make(*a), "B": make(*b)}, ["Y"])
            for a, b in shapes]


