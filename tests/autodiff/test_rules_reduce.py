"""Gradient RULES of the reductions and friends (ReduceL1/L2/SumSquare/LogSum/LogSumExp, ReduceProd,
GlobalMaxPool, CumSum, TopK, Einsum) end to end through the artifact generator against float64
finite differences (tests/helpers/grad_harness.py), then against torch.autograd in float32."""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from grad_harness import RNG, Case, i64, node, rand, train_grads


def _distinct(*shape: int, scale: float = 0.1) -> np.ndarray:
    """Values at least ``scale`` apart: no ties, so max/top-k picks survive the finite differences."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) - n / 2.0).reshape(shape) * scale


def _positive(*shape: int) -> np.ndarray:
    return rand(*shape, lo=0.3, hi=1.5)


def _away(*shape: int) -> np.ndarray:
    return rand(*shape, lo=0.2, hi=1.2) * RNG.choice([-1.0, 1.0], shape)


def _reduce(op: str, make: Callable[..., np.ndarray]) -> List[Case]:
    cases = []
    for keep in (0, 1):
        cases.append(Case("%s opset13 axes attr [1] keepdims=%d" % (op, keep),
                          [node(op, ["X"], axes=[1], keepdims=keep)], {"X": make(2, 3, 4)}, ["Y"], opset=13))
        cases.append(Case("%s opset18 axes input [0,-1] keepdims=%d" % (op, keep),
                          [node(op, ["X", "A"], keepdims=keep)], {"X": make(2, 3, 4), "A": i64(0, -1)}, ["Y"],
                          opset=18))
    cases += [
        Case(op + " all axes", [node(op, ["X"])], {"X": make(2, 3)}, ["Y"], opset=18),
        Case(op + " all axes keepdims=0", [node(op, ["X"], keepdims=0)], {"X": make(2, 3)}, ["Y"], opset=13),
        Case(op + " opset11 axes attr", [node(op, ["X"], axes=[0, 2], keepdims=0)], {"X": make(2, 3, 2)}, ["Y"],
             opset=11),
        Case(op + " noop_with_empty_axes", [node(op, ["X"], noop_with_empty_axes=1)], {"X": make(2, 3)}, ["Y"],
             opset=18),
        Case(op + " empty axes input", [node(op, ["X", "A"], keepdims=0)],
             {"X": make(2, 3), "A": np.zeros(0, np.int64)}, ["Y"], opset=18),
    ]
    return cases


def _reduce_prod() -> List[Case]:
    x = _away(2, 3, 4)
    x[0, 1, 2] = 0.0  # one zero: its neighbours get 0, it gets the product of the others
    x2 = _away(3, 4)
    x2[1, 0] = x2[1, 3] = 0.0  # two zeros in one row: every gradient of that row is 0
    return _reduce("ReduceProd", _away) + [
        Case("ReduceProd a zero in the group", [node("ReduceProd", ["X"], axes=[1], keepdims=0)], {"X": x}, ["Y"],
             opset=13),
        Case("ReduceProd a zero, all axes", [node("ReduceProd", ["X"], keepdims=0)], {"X": x[:, :, :2]}, ["Y"],
             opset=13),
        Case("ReduceProd two zeros in a row", [node("ReduceProd", ["X", "A"], keepdims=1)],
             {"X": x2, "A": i64(1)}, ["Y"], opset=18),
    ]


def _global_max_pool() -> List[Case]:
    return [Case("GlobalMaxPool 2-D", [node("GlobalMaxPool", ["X"])], {"X": _distinct(2, 3, 3, 4)}, ["Y"]),
            Case("GlobalMaxPool 1-D", [node("GlobalMaxPool", ["X"])], {"X": _distinct(2, 3, 5)}, ["Y"])]


def _cum_sum() -> List[Case]:
    cases = []
    for exclusive in (0, 1):
        for reverse in (0, 1):
            cases.append(Case("CumSum axis 1 exclusive=%d reverse=%d" % (exclusive, reverse),
                              [node("CumSum", ["X", "axis"], exclusive=exclusive, reverse=reverse)],
                              {"X": rand(2, 4, 3), "axis": np.array(1, np.int64)}, ["Y"], opset=14))
    cases.append(Case("CumSum int32 axis -1 exclusive reverse", [node("CumSum", ["X", "axis"], exclusive=1, reverse=1)],
                      {"X": rand(3, 5), "axis": np.array(-1, np.int32)}, ["Y"], opset=11))
    cases.append(Case("CumSum 1-D", [node("CumSum", ["X", "axis"])], {"X": rand(6), "axis": np.array(0, np.int64)},
                      ["Y"], opset=14))
    return cases


def _top_k() -> List[Case]:
    def topk(name, shape, k, opset=11, **attrs):
        return Case(name, [node("TopK", ["X", "K"], ["V", "I"], **attrs)], {"X": _distinct(*shape), "K": i64(k)},
                    ["V"], opset=opset)
    return [
        topk("TopK last axis largest", (3, 5), 2),
        topk("TopK axis 0 smallest", (4, 3), 3, axis=0, largest=0),
        topk("TopK middle axis all", (2, 4, 3), 4, axis=1),
        topk("TopK k=0", (2, 4), 0),
        topk("TopK opset10", (3, 4), 2, opset=10, axis=-1),
        topk("TopK unsorted", (3, 6), 3, sorted=0),
        # a TopK node without its Indices output: the gradient asks the node for it
        Case("TopK values only", [node("TopK", ["X", "K"], ["V"], axis=0)], {"X": _distinct(4, 3), "K": i64(2)},
             ["V"]),
        # the Indices output also read downstream (as an integer, no gradient through it)
        Case("TopK indices read too", [node("TopK", ["X", "K"], ["V", "I"], axis=1),
                                       node("Cast", ["I"], ["If"], to=TensorProto.DOUBLE),
                                       node("Mul", ["V", "If"], ["Y"])],
             {"X": _distinct(2, 5), "K": i64(3)}, ["Y"]),
    ]


EINSUM = [  # (equation, operand shapes)
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("bld,lrd->blr", [(2, 3, 4), (3, 5, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),                              # a label summed in one operand only
    ("ij->i", [(3, 4)]),
    ("ij,k->ik", [(3, 4), (2,)]),                     # j only in the first operand, k only in the second
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),             # implicit output
    ("Bij,bjK", [(2, 3, 4), (2, 4, 5)]),             # implicit, mixed case
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),  # '...' broadcast, ranks 2 and 1
    ("...ij,jk->...ik", [(2, 3, 3, 4), (4, 2)]),     # '...' in one operand only
    ("...ij,...jk", [(2, 3, 4), (4, 5)]),             # implicit with '...'
    ("i...j,i...j->i...j", [(2, 3, 4), (2, 1, 4)]),  # '...' in the middle, broadcast
    ("i...j,j->i...", [(2, 3, 4), (4,)]),
    ("b...c->c...b", [(2, 3, 4, 5)]),
    ("ij,jk->ik", [(2, 1), (3, 4)]),                  # size-1 label broadcast
    ("ii,ij->j", [(3, 3), (3, 4)]),                   # a diagonal
    ("ii->i", [(3, 3)]),
    ("ii", [(4, 4)]),                                  # trace
    ("bii->bi", [(2, 3, 3)]),
    ("i...i->...i", [(3, 2, 3)]),                      # diagonal around a '...'
    ("...ii,...i->...", [(2, 3, 3), (1, 3)]),          # batched trace-like with broadcast
    ("iji->j", [(3, 2, 3)]),
    ("iii->", [(2, 2, 2)]),                            # a label three times
]


def _einsum() -> List[Case]:
    cases = []
    for eq, shapes in EINSUM:
        inits = {"X%d" % i: rand(*s) for i, s in enumerate(shapes)}
        cases.append(Case("Einsum %s %s" % (eq, shapes), [node("Einsum", sorted(inits), equation=eq)], inits, ["Y"]))
    x = rand(3, 4)
    cases.append(Case("Einsum same tensor twice", [node("Einsum", ["X", "X"], equation="ij,kj->ik")], {"X": x},
                      ["Y"]))
    return cases


CASES: Dict[str, Callable[[], List[Case]]] = {
    "CumSum": _cum_sum,
    "Einsum": _einsum,
    "GlobalMaxPool": _global_max_pool,
    "ReduceL1": lambda: _reduce("ReduceL1", _away),
    "ReduceL2": lambda: _reduce("ReduceL2", rand),
    "ReduceLogSum": lambda: _reduce("ReduceLogSum", _positive),
    "ReduceLogSumExp": lambda: _reduce("ReduceLogSumExp", lambda *s: rand(*s, lo=-3, hi=3)),
    "ReduceProd": _reduce_prod,
    "ReduceSumSquare": lambda: _reduce("ReduceSumSquare", rand),
    "TopK": _top_k,
}


def _model(nodes, inits, out="Y", opset=17):
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(out, 0, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_reduce_prod_gradient_with_zeros_is_exact():
    # d/dx prod = product of the others: exact at zeros, where Y / X would give NaN
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]])
    nodes = [node("ReduceProd", ["P"], ["Z"], axes=[1], keepdims=0), node("ReduceSum", ["Z"], ["Y"], keepdims=0)]
    grads = train_grads(_model(nodes, {"P": x}, opset=13), ["P"])
    np.testing.assert_array_equal(grads["P"], [[0, 6, 0], [0, 0, 0], [8, 4, 2]])


# ---- against torch.autograd, float32 --------------------------------------------------------------
try:
    import torch
except ImportError:  # the rule tests above need no torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _grads_vs_torch(nodes, params: Dict[str, np.ndarray], torch_fn, consts=None, opset=17, rtol=1e-5, atol=1e-6):
    """pytrain's gradients of loss = sum(Y * R) (float32, one train step) against torch's."""
    consts = dict(consts or {})
    y_probe = torch_fn({k: torch.tensor(v) for k, v in params.items()})
    r = _f32(*y_probe.shape)
    nodes = list(nodes) + [node("Mul", ["Y", "R"], ["YR"]), node("ReduceSum", ["YR"], ["loss"], keepdims=0)]
    model = _model(nodes, dict(params, R=r, **consts), out="loss", opset=opset)
    got = train_grads(model, list(params))
    ts = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    (torch_fn(ts) * torch.tensor(r)).sum().backward()
    for k, t in ts.items():
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(got[k], t.grad.numpy(), rtol=rtol, atol=atol, err_msg=k)


@needs_torch
@pytest.mark.parametrize("ord_,op", [(1, "ReduceL1"), (2, "ReduceL2")])
def test_torch_vector_norm(ord_, op):
    x = _f32(3, 4, 5)
    x[1, :, 2] = 0.0  # an all-zero group: torch's gradient there is 0
    _grads_vs_torch([node(op, ["P", "A"], keepdims=0)], {"P": x},
                    lambda t: torch.linalg.vector_norm(t["P"], ord=ord_, dim=(1,)), {"A": i64(1)}, opset=18)
    _grads_vs_torch([node(op, ["P"], axes=[0, 2], keepdims=1)], {"P": x},
                    lambda t: torch.norm(t["P"], p=ord_, dim=(0, 2), keepdim=True), opset=13)


@needs_torch
def test_torch_sum_square_and_log_sum():
    x = _f32(3, 4)
    _grads_vs_torch([node("ReduceSumSquare", ["P"], axes=[1], keepdims=0)], {"P": x},
                    lambda t: (t["P"] ** 2).sum(1), opset=13)
    xp = np.abs(x) + 0.5
    _grads_vs_torch([node("ReduceLogSum", ["P"], axes=[0])], {"P": xp},
                    lambda t: torch.log(t["P"].sum(0, keepdim=True)), opset=13)


@needs_torch
def test_torch_logsumexp():
    x = _f32(4, 6, scale=30.0)  # large values: the stable form is needed in float32
    x[0] += 100.0
    _grads_vs_torch([node("ReduceLogSumExp", ["P", "A"], keepdims=0)], {"P": x},
                    lambda t: torch.logsumexp(t["P"], dim=1), {"A": i64(-1)}, opset=18)


@needs_torch
def test_torch_prod_with_a_zero():
    x = _f32(3, 5)
    x[1, 2] = 0.0
    x[2, 0] = x[2, 3] = 0.0
    _grads_vs_torch([node("ReduceProd", ["P"], axes=[1], keepdims=0)], {"P": x},
                    lambda t: torch.prod(t["P"], dim=1), opset=13)
    _grads_vs_torch([node("ReduceProd", ["P"], keepdims=0)], {"P": x[:2, :3].copy()},
                    lambda t: torch.prod(t["P"]), opset=13)


@needs_torch
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("exclusive", [0, 1])
def test_torch_cumsum(exclusive, reverse):
    def fn(t):
        x = t["P"].flip(1) if reverse else t["P"]
        y = torch.cumsum(x, dim=1)
        if exclusive:  # torch has no exclusive flag: the inclusive sum minus the element
            y = y - x
        return y.flip(1) if reverse else y
    _grads_vs_torch([node("CumSum", ["P", "axis"], exclusive=exclusive, reverse=reverse)], {"P": _f32(3, 6)}, fn,
                    {"axis": np.array(1, np.int64)}, opset=14)


@needs_torch
@pytest.mark.parametrize("largest", [1, 0])
def test_torch_topk(largest):
    x = _f32(4, 7)
    _grads_vs_torch([node("TopK", ["P", "K"], ["Y", "I"], axis=1, largest=largest)], {"P": x},
                    lambda t: torch.topk(t["P"], 3, dim=1, largest=bool(largest)).values, {"K": i64(3)}, opset=11)


@pytest.mark.parametrize("eq,shapes", [("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
                                       ("bij,bjk->bik", [(3, 2, 4), (3, 4, 5)]),
                                       ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
                                       ("i...j,j->i...", [(2, 3, 4), (4,)]),
                                       ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
                                       ("bii->bi", [(2, 3, 3)]), ("ii", [(4, 4)])])
@needs_torch
def test_torch_einsum(eq, shapes):
    params = {"P%d" % i: _f32(*s) for i, s in enumerate(shapes)}
    names = sorted(params)
    _grads_vs_torch([node("Einsum", names, equation=eq)], params,
                    lambda t: torch.einsum(eq, *[t[k] for k in names]), rtol=1e-4, atol=1e-5)


@needs_torch
def test_torch_adaptive_max_pool2d():
    x = _f32(2, 3, 4, 5)
    x[0, 0] = 0.0  # a channel of ties (as after a ReLU): torch sends dY to the first position
    x[1, 2, 1, 1] = x[1, 2, 3, 0] = 9.0
    _grads_vs_torch([node("GlobalMaxPool", ["P"])], {"P": x},
                    lambda t: torch.nn.functional.adaptive_max_pool2d(t["P"], 1))


# ---- the same gradients on Python 3.8 + numpy 1.17 (the browser's Pyodide) ------------------------
import test_python38_numpy117 as _numpy117  # noqa: E402

py38 = _numpy117.py38  # the fixture: a Python 3.8 venv with numpy 1.17.5 (built once, reused)

_PY38_SCRIPT = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.device.api import CheckpointState, Module
d = np.load(sys.argv[2])
state = CheckpointState.load_checkpoint(bytes(d["checkpoint"].tobytes()))
loss = Module(bytes(d["training"].tobytes()), state, bytes(d["eval"].tobytes()))()
out = {"grad_" + k: p.grad for k, p in state.parameters.items()}
np.savez(sys.argv[3], numpy_version=np.__version__, loss=np.asarray(loss), **out)
"""


def _every_op_model():
    """One float32 model through every op of this module, each feeding the loss."""
    r = np.random.default_rng(7)
    inits = {"P": r.standard_normal((2, 3, 4)).astype(np.float32), "Q": r.standard_normal((2, 4, 3)).astype(np.float32),
             "K": i64(2), "ax": np.array(1, np.int64), "A": i64(1), "R": r.standard_normal((2, 3)).astype(np.float32)}
    terms = []

    def add(nodes, out):
        terms.append((nodes, out))
    add([node("ReduceL1", ["P", "A"], ["l1"], keepdims=0)], "l1")
    add([node("ReduceL2", ["P"], ["l2"], axes=[2])], "l2")
    add([node("ReduceSumSquare", ["P", "A"], ["ss"], keepdims=0)], "ss")
    add([node("Exp", ["P"], ["ep"]), node("ReduceLogSum", ["ep", "A"], ["ls"], keepdims=0)], "ls")
    add([node("ReduceLogSumExp", ["P", "A"], ["lse"], keepdims=0)], "lse")
    add([node("ReduceProd", ["P", "A"], ["pr"], keepdims=0)], "pr")
    add([node("Unsqueeze", ["P", "ax"], ["p4"]), node("GlobalMaxPool", ["p4"], ["gm"])], "gm")
    add([node("CumSum", ["P", "ax"], ["cs"], exclusive=1, reverse=1)], "cs")
    add([node("TopK", ["P", "K"], ["tk", "ti"], axis=1)], "tk")
    add([node("Einsum", ["P", "Q"], ["mm"], equation="bij,bjk->bik"),
         node("Einsum", ["mm"], ["dg"], equation="bii->bi"),
         node("Einsum", ["dg", "R", "P"], ["e3"], equation="bi,bi,bi...->b...")], "e3")
    nodes, sums = [], []
    for k, (ns, out) in enumerate(terms):
        nodes += ns + [node("ReduceSum", [out], ["s%d" % k], keepdims=0)]
        sums.append("s%d" % k)
    nodes.append(node("Sum", sums, ["loss"]))
    return _model(nodes, inits, out="loss", opset=18)


def test_same_gradients_on_python38_numpy117(py38, tmp_path):
    import subprocess

    from pytrain.device.api import CheckpointState, Module

    arts = _artifacts_for(_every_op_model())
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(Module(arts.training_model, state, arts.eval_model)())
    np.savez(tmp_path / "in.npz", **{k: np.frombuffer(v, np.uint8) for k, v in (
        ("training", arts.training_model), ("eval", arts.eval_model), ("checkpoint", arts.checkpoint))})
    (tmp_path / "run.py").write_text(_PY38_SCRIPT)
    subprocess.run([str(py38), str(tmp_path / "run.py"), str(_numpy117.ROOT), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, timeout=600)
    got = np.load(tmp_path / "out.npz")
    assert str(got["numpy_version"]) == "1.17.5"
    np.testing.assert_allclose(float(got["loss"]), loss, rtol=1e-6)
    for name in ("P", "Q", "R"):
        assert np.any(state.parameters[name].grad != 0)
        np.testing.assert_allclose(got["grad_" + name], state.parameters[name].grad, rtol=1e-5, atol=1e-5,
                                   err_msg=name)


def _artifacts_for(model):
    from pytrain.generator import artifacts

    return artifacts.generate_artifacts(model.SerializeToString(), requires_grad=["P", "Q", "R"], loss=None,
                                        optimizer=artifacts.OptimType.SGD)
