"""Gradient rule of ``If`` (``pytrain/ops/control``) whose condition is decided at run time, as ORT's
gradient builder has it: the backward takes the branch the forward took. The gradient is itself an
``If`` on the same condition over two gradient branches built here, one per forward branch: each
recomputes its branch's forward (a branch's values live only inside it) and runs that branch's backward
from the gradients of the If's outputs. Its outputs are the gradients of the enclosing scopes' values the
branches read (ORT's implicit inputs, :func:`pytrain.autodiff.engine.gradient_inputs`); a value the
taken branch does not read (or reads without a path to the outputs) gets exact zeros, as ORT and
PyTorch give the weights of the branch not taken. An If the generator can decide is inlined before
(pytrain/generator/normalize/control.py); Loop and Scan have no rule: the generator unrolls those it can."""
from __future__ import annotations

from typing import Dict, List, Sequence

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient
from pytrain.ops.control.subgraph import graph_outer_names, outer_names
from pytrain.proto import GraphProto, NodeProto, ValueInfoProto, make_graph


def _branch_gradient(b: B, body: GraphProto, dy: G, wrt: Sequence[str], tag: str) -> GraphProto:
    """The gradient branch of ``body``: its forward again, then the gradients of ``wrt`` (outer names)
    from ``dy`` (the gradients of ``body``'s outputs, values of the scope around)."""
    # the copy keeps the branch's names: the two Ifs are siblings, neither scope sees into the other
    nodes = [NodeProto.FromString(n.SerializeToString()) for n in body.node]
    seeds: Dict[str, List[str]] = {}
    for out, d in zip(body.output, dy):
        if d is not None:
            seeds.setdefault(out.name, []).append(d)
    gb = B(b.scope, b.backward)  # the engine's backward pass, handed down (the engine imports the rules)
    available = graph_outer_names(body) + [t.name for t in body.initializer] + [d for d in dy if d]
    found, _ = b.backward(gb, nodes, available, seeds, wrt)
    outs = []
    for x in wrt:
        g = found[x] if found[x] is not None else gb.zeros_like(x)
        outs.append(gb.op("Identity", g))  # a branch output produced in the branch, even a seed passed on
    return make_graph(nodes + gb.nodes, "%s/%s_grad" % (tag, body.name or "branch"), [],
                      [ValueInfoProto(name=o) for o in outs], list(body.initializer) + gb.initializer_protos())


@gradient("If")
def _if(b: B, n: N, dy: G) -> G:
    outer = outer_names(n.node)
    wrt = [x for k, x in enumerate(outer) if n.needs(1 + k)]
    if not wrt:
        return [None] * (1 + len(outer))
    for g in (n.attr("then_branch"), n.attr("else_branch")):  # gradient names stay clear of the branches'
        b.scope.taken.update(v for m in g.node for v in list(m.input) + list(m.output))
    tag = n.node.name or n.node.output[0]
    then_g = _branch_gradient(b, n.attr("then_branch"), dy, wrt, tag)
    else_g = _branch_gradient(b, n.attr("else_branch"), dy, wrt, tag)
    names = [b.scope.fresh("grad/%s/d_%s" % (tag, x)) for x in wrt]
    b.op("If", n.x(0), out_names=names, then_branch=then_g, else_branch=else_g)
    got = dict(zip(wrt, names))
    return [None] + [got.get(x) for x in outer]
