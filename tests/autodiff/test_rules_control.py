"""Gradient rule of If decided at run time (its condition computed from a weight, so the generator
cannot inline it) through the artifact generator, against float64 finite differences
(tests/helpers/grad_harness.py): either branch taken, nested, a weight read by both branches or by one."""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np
from onnx import TensorProto, helper

from grad_harness import Case, node, rand

V = helper.make_tensor_value_info


def _branches(then_nodes, then_out, else_nodes, else_out):
    return {"then_branch": helper.make_graph(then_nodes, "then", [], [V(then_out, TensorProto.DOUBLE, None)]),
            "else_branch": helper.make_graph(else_nodes, "else", [], [V(else_out, TensorProto.DOUBLE, None)])}


def _if() -> List[Case]:
    cond = [node("ReduceSum", ["A"], ["sa"], keepdims=0), node("Greater", ["sa", "zero"], ["c"])]
    body = _branches([node("Mul", ["A", "W"], ["t"]), node("Tanh", ["t"], ["t2"], )], "t2",
                     [node("Sub", ["A", "U"], ["e"]), node("Mul", ["e", "W"], ["e2"])], "e2")
    inner = _branches([node("Sigmoid", ["t"], ["it"])], "it", [node("Identity", ["A"], ["ie"])], "ie")
    nested = _branches([node("Mul", ["A", "W"], ["t"]), node("If", ["c2"], ["t3"], **inner),
                        node("Add", ["t", "t3"], ["t4"])], "t4", [node("Neg", ["U"], ["e3"])], "e3")
    zero = np.float64(0)
    cases = []
    for sign in (1.0, -1.0):  # the then branch, the else branch
        a = np.abs(rand(2, 3)) * sign
        cases.append(Case("If %s branch" % ("then" if sign > 0 else "else"), cond + [node("If", ["c"], ["Y"], **body)],
                          {"A": a, "W": rand(3), "U": rand(2, 3), "zero": zero}, ["Y"]))
        cases.append(Case("If nested, %s" % ("then" if sign > 0 else "else"),
                          cond + [node("ReduceMax", ["W"], ["mw"], keepdims=0), node("Less", ["mw", "zero"], ["c2"]),
                                  node("If", ["c"], ["Y"], **nested)],
                          {"A": a, "W": -np.abs(rand(3)), "U": rand(2, 3), "zero": zero}, ["Y"]))
    return cases


CASES: Dict[str, Callable[[], List[Case]]] = {"If": _if}
