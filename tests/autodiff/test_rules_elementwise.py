"""Gradient rules of the element-wise ops (HardSwish, HardSigmoid, Elu, Selu, Celu,
PRelu, Mish, Softsign, Sin, Cos, Mod) and of Max and Min, through ``grad_harness`` (float64 central
finite differences of the same scalar, at points away from the kinks); the tie rule of Max/Min; and
the torch.nn layers (Hardswish, Hardsigmoid, ELU, SELU, CELU, PReLU, Mish, Softsign) against
torch.autograd in float32."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from grad_harness import RNG, Case, away, node, rand, train_grads, with_loss
from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module


def off_kinks(*shape: int, kinks: Sequence[float], lo: float = -5.0, hi: float = 5.0, gap: float = 0.1) -> np.ndarray:
    """Uniform values in [lo, hi] at least ``gap`` from every kink (finite differences are exact
    only where the function is smooth)."""
    x = RNG.uniform(lo, hi, shape)
    for k in kinks:
        near = np.abs(x - k) < gap
        x = np.where(near, k + np.where(x >= k, gap, -gap) * 2, x)
    return x.astype(np.float64)


#: the opset that defines each op (Mish is new in 18): cases are built there
_OPSET = {"Mish": 18}


def _unary(op: str, kinks: Sequence[float], attr_sets: Sequence[dict], **kw) -> Callable[[], List[Case]]:
    opset = _OPSET.get(op, 17)

    def build() -> List[Case]:
        cases = []
        for attrs in attr_sets:
            ks = kinks(attrs) if callable(kinks) else kinks
            cases.append(Case("%s %s" % (op, attrs), [node(op, ["X"], **attrs)],
                              {"X": off_kinks(3, 4, kinks=ks, **kw)}, ["Y"], opset=opset))
        cases.append(Case(op + " 0-d", [node(op, ["X"], **attr_sets[0])],
                          {"X": np.array(-0.7 if op != "HardSigmoid" else 0.3)}, ["Y"], opset=opset))
        return cases
    return build


def _hard_sigmoid_kinks(attrs: dict) -> List[float]:
    alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
    return [-beta / alpha, (1 - beta) / alpha]


def _prelu() -> List[Case]:
    shapes = [((2, 3, 2, 2), (3, 1, 1)), ((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 3), (1,)), ((2, 3), ()),
              ((2, 3, 2), (1, 3, 1))]
    return [Case("PRelu %s slope %s" % (xs, ss), [node("PRelu", ["X", "S"])],
                 {"X": away(*xs, gap=0.1, scale=2.0), "S": np.asarray(rand(*ss))}, ["Y"]) for xs, ss in shapes]


def _mod_operands(a_shape, b_shape):
    """A, B with |B| >= 0.3 and every A/B at least 0.1 from an integer (Mod jumps there); A takes
    the broadcast shape when a quotient has to be moved off a jump."""
    b = np.asarray(away(*b_shape, gap=0.3, scale=2.0))
    a = np.asarray(rand(*a_shape, lo=-4, hi=4))
    full_a, full_b = np.broadcast_arrays(a, b)
    q = full_a / full_b
    frac = q - np.floor(q)
    if np.any((frac < 0.1) | (frac > 0.9)):
        a = np.asarray(full_a + (0.5 - frac) * full_b, dtype=np.float64)
    return a, b


def _mod() -> List[Case]:
    cases = []
    for fmod in (0, 1):
        for a_shape, b_shape in [((2, 3), (2, 3)), ((2, 3), (3,)), ((3,), (2, 3)), ((2, 3), ())]:
            a, b = _mod_operands(a_shape, b_shape)
            cases.append(Case("Mod fmod=%d %s %% %s" % (fmod, a.shape, b.shape), [node("Mod", ["A", "B"], fmod=fmod)],
                              {"A": a, "B": b}, ["Y"]))
    return cases


def _distinct(*shape: int) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    return (RNG.permutation(n) * 0.3 - n * 0.15 + RNG.uniform(-0.05, 0.05, n)).reshape(shape).astype(np.float64)


def _extreme(op: str) -> Callable[[], List[Case]]:
    def build() -> List[Case]:
        tie_a = rand(2, 3)
        tie_b = np.where(np.arange(6).reshape(2, 3) % 2 == 0, tie_a, tie_a + away(2, 3, gap=0.2))
        return [
            Case(op + " 1 input", [node(op, ["A"])], {"A": _distinct(2, 3)}, ["Y"]),
            Case(op + " 2 inputs", [node(op, ["A", "B"])], {"A": _distinct(2, 3), "B": _distinct(2, 3)}, ["Y"]),
            Case(op + " 3 inputs broadcast", [node(op, ["A", "B", "C"])],
                 {"A": _distinct(2, 3), "B": _distinct(3), "C": _distinct(2, 1)}, ["Y"]),
            Case(op + " 0-d and matrix", [node(op, ["A", "B"])], {"A": np.array(0.05), "B": _distinct(3, 2)}, ["Y"]),
            # two inputs tied on half the elements: central differences give 1/2 each there, as torch
            Case(op + " ties", [node(op, ["A", "B"])], {"A": tie_a, "B": tie_b}, ["Y"]),
            Case(op + " same input twice", [node(op, ["A", "A", "B"])], {"A": _distinct(2, 3), "B": _distinct(3)},
                 ["Y"]),
        ]
    return build


CASES: Dict[str, Callable[[], List[Case]]] = {
    "HardSwish": _unary("HardSwish", [-3.0, 3.0], [{}], lo=-5, hi=5),
    "HardSigmoid": _unary("HardSigmoid", _hard_sigmoid_kinks,
                          [{}, {"alpha": 1.0 / 6.0, "beta": 0.5}, {"alpha": 0.7, "beta": -0.2}], lo=-4, hi=4),
    "Elu": _unary("Elu", [0.0], [{}, {"alpha": 0.4}], lo=-3, hi=3),
    "Selu": _unary("Selu", [0.0], [{}, {"alpha": 2.0, "gamma": 0.7}], lo=-3, hi=3),
    "Celu": _unary("Celu", [0.0], [{}, {"alpha": 2.5}], lo=-3, hi=3),
    "Mish": _unary("Mish", [], [{}], lo=-4, hi=4),
    "Softsign": _unary("Softsign", [0.0], [{}], lo=-4, hi=4),
    "Sin": _unary("Sin", [], [{}], lo=-4, hi=4),
    "Cos": _unary("Cos", [], [{}], lo=-4, hi=4),
    "PRelu": _prelu,
    "Mod": _mod,
    "Max": _extreme("Max"),
    "Min": _extreme("Min"),
}


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_split_a_tie_evenly_among_the_tied_inputs(op):
    # three inputs equal everywhere: each gets a third of the output gradient (a pair: a half)
    a = rand(2, 3)
    for k in (2, 3):
        names = ["A%d" % i for i in range(k)]
        case = Case("tie", [node(op, names)], {n: a.copy() for n in names}, ["Y"])
        model = with_loss(case)
        r = numpy_helper.to_array([t for t in model.graph.initializer if t.name == "R0"][0])
        grads = train_grads(model, names)
        for n in names:
            np.testing.assert_allclose(grads[n], r / k, rtol=1e-12, err_msg="%s of %d tied inputs" % (n, k))


def test_mod_rule_matches_torch_remainder_and_fmod():
    torch = pytest.importorskip("torch")
    a, b = _mod_operands((2, 3), (2, 3))
    for fmod, fn in ((0, torch.remainder), (1, torch.fmod)):
        case = Case("Mod", [node("Mod", ["A", "B"], fmod=fmod)], {"A": a, "B": b}, ["Y"])
        model = with_loss(case)
        r = numpy_helper.to_array([t for t in model.graph.initializer if t.name == "R0"][0])
        got = train_grads(model, ["A", "B"])
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        (fn(ta, tb) * torch.tensor(r)).sum().backward()
        np.testing.assert_allclose(got["A"], ta.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(got["B"], tb.grad.numpy(), rtol=1e-12)


# ---- torch.nn layers against torch.autograd (float32) ----------------------------------------------
F32 = TensorProto.FLOAT


def _layer_step(op_nodes, params: Dict[str, np.ndarray], x: np.ndarray, target: np.ndarray):
    nodes = list(op_nodes) + [node("MatMul", ["act", "W"], ["out"])]
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("X", F32, list(x.shape))],
        [helper.make_tensor_value_info("out", F32, list(target.shape))],
        [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    arts = artifacts.generate_artifacts(model.SerializeToString(), requires_grad=sorted(params),
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(Module(arts.training_model, state, arts.eval_model)(x, target))
    return loss, {k: state.parameters[k].grad for k in params}


LAYERS = [
    ("Hardswish", lambda: [node("HardSwish", ["h"], ["act"])], lambda nn: nn.Hardswish()),
    ("Hardsigmoid", lambda: [node("HardSigmoid", ["h"], ["act"], alpha=1.0 / 6.0, beta=0.5)],
     lambda nn: nn.Hardsigmoid()),
    ("ELU", lambda: [node("Elu", ["h"], ["act"], alpha=0.7)], lambda nn: nn.ELU(alpha=0.7)),
    ("SELU", lambda: [node("Selu", ["h"], ["act"])], lambda nn: nn.SELU()),
    ("CELU", lambda: [node("Celu", ["h"], ["act"], alpha=1.5)], lambda nn: nn.CELU(alpha=1.5)),
    ("Mish", lambda: [node("Mish", ["h"], ["act"])], lambda nn: nn.Mish()),
    ("Softsign", lambda: [node("Softsign", ["h"], ["act"])], lambda nn: nn.Softsign()),
]


@pytest.mark.parametrize("name,onnx_nodes,torch_layer", LAYERS, ids=[x[0] for x in LAYERS])
def test_layer_against_torch_autograd(name, onnx_nodes, torch_layer):
    torch = pytest.importorskip("torch")
    x = (RNG.standard_normal((6, 5)) * 2).astype(np.float32)
    target = RNG.standard_normal((6, 3)).astype(np.float32)
    p = {"V": (RNG.standard_normal((5, 4)) * 1.5).astype(np.float32),
         "W": RNG.standard_normal((4, 3)).astype(np.float32)}
    loss, grads = _layer_step([node("MatMul", ["X", "V"], ["h"])] + onnx_nodes(), p, x, target)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    ref = torch.nn.functional.mse_loss(torch_layer(torch.nn)(torch.tensor(x) @ tp["V"]) @ tp["W"],
                                       torch.tensor(target))
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5)
    for k in p:
        assert grads[k].dtype == np.float32
        np.testing.assert_allclose(grads[k], tp[k].grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)


def test_prelu_layer_against_torch_autograd():
    # nn.PReLU(num_parameters=C) on (N, C, L): torch exports the slope as (C, 1); the slope trains
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    target = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    slope = np.array([0.25, -0.1, 0.6], np.float32)
    p = {"S": slope.reshape(3, 1), "W": RNG.standard_normal((5, 2)).astype(np.float32)}
    loss, grads = _layer_step([node("PRelu", ["X", "S"], ["act"])], p, x, target)
    layer = torch.nn.PReLU(3)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(slope))
    tw = torch.tensor(p["W"], requires_grad=True)
    ref = torch.nn.functional.mse_loss(layer(torch.tensor(x)) @ tw, torch.tensor(target))
    ref.backward()
    np.testing.assert_allclose(loss, float(ref.detach()), rtol=1e-5)
    np.testing.assert_allclose(grads["S"].reshape(3), layer.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["W"], tw.grad.numpy(), rtol=1e-4, atol=1e-6)
