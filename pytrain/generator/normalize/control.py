"""Control flow made straight-line for training, where the generator can decide it.

* An ``If`` whose condition is known when the training model is generated (computed from initializers,
  Constant nodes and the static dims of declared shapes) becomes the nodes of the branch it takes.
* A ``Loop`` whose trip count is known and whose body never stops it early (its condition output is
  its condition input, or true), and a ``Scan`` whose sequence lengths are declared, are unrolled: one
  copy of the body per iteration, the scan outputs stacked with Unsqueeze + Concat.

The gradient then flows through ordinary nodes, as ORT's gradient builder has it. What stays control
flow runs as such (pytrain/ops/control): an If decided at run time has a gradient (the branch taken,
pytrain/autodiff/rules/control.py); through a Loop or Scan left a gradient cannot be defined, so
:func:`refuse_gradient_through` names it when it reads a float initializer (a weight may train)."""
from __future__ import annotations

from typing import Dict, List, Sequence, Set

import numpy as np

from pytrain.errors import UnsupportedOpError
from pytrain.engine.graph import NameScope, all_names, node_label
from pytrain.generator.normalize.static import StaticValues
from pytrain.ops.control.subgraph import all_nodes, outer_names, subgraphs
from pytrain.proto import GraphProto, NodeProto, from_array, make_node, node_attributes, to_array

CONTROL = ("If", "Loop", "Scan")


class _Inliner:
    """Copies a body's nodes into the graph under fresh names, its formal inputs bound to values."""

    def __init__(self, graph: GraphProto, scope: NameScope) -> None:
        self.graph, self.scope = graph, scope
        self.out: List[NodeProto] = []  # the graph's new node list

    def const(self, value: np.ndarray, hint: str) -> str:
        name = self.scope.fresh(hint)
        self.graph.initializer.append(from_array(np.asarray(value), name))
        return name

    def copy(self, body: GraphProto, bind: Dict[str, str], tag: str) -> List[str]:
        """Append ``body``'s nodes to the result list; returns the names of its outputs."""
        names = dict(bind)
        for t in body.initializer:
            names[t.name] = self.const(to_array(t, "a body's initializer"), "%s/%s" % (tag, t.name))
        for n in body.node:
            for o in n.output:
                if o:
                    names[o] = self.scope.fresh("%s/%s" % (tag, o))
        for n in body.node:
            c = NodeProto.FromString(n.SerializeToString())
            c.input = [names.get(i, i) for i in c.input]
            c.output = [names.get(o, o) for o in c.output]
            c.name = self.scope.fresh("%s/%s" % (tag, n.name or n.op_type))
            for g in subgraphs(c):
                _rename_reads(g, names)
            self.out.append(c)
        return [names.get(o.name, o.name) for o in body.output]

    def identity(self, src: str, dst: str) -> None:
        self.out.append(make_node("Identity", [src], [dst], name=self.scope.fresh(dst + "/Identity")))

    def stack(self, parts: Sequence[str], axis: int, dst: str, opset: int) -> None:
        """``dst`` = the ``parts`` stacked along a new ``axis``."""
        ups = []
        for p in parts:
            u = self.scope.fresh(p + "/stacked")
            if opset >= 13:
                axes = self.const(np.array([axis], np.int64), p + "/axes")
                self.out.append(make_node("Unsqueeze", [p, axes], [u], name=self.scope.fresh(u)))
            else:
                self.out.append(make_node("Unsqueeze", [p], [u], name=self.scope.fresh(u), axes=[axis]))
            ups.append(u)
        self.out.append(make_node("Concat", ups, [dst], name=self.scope.fresh(dst + "/Concat"), axis=axis))


def _rename_reads(graph: GraphProto, names: Dict[str, str]) -> None:
    """A nested body reads the renamed values of the scope around it under their new names."""
    for n in graph.node:
        n.input = [names.get(i, i) for i in n.input]
        for g in subgraphs(n):
            _rename_reads(g, names)
    for o in graph.output:
        if o.name in names and o.name not in {x for n in graph.node for x in n.output}:
            o.name = names[o.name]


def _passes_condition(body: GraphProto, static: StaticValues) -> bool:
    """Whether the Loop body's condition output is always true given a true condition input."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output}
    seen = 0
    while cond_out != cond_in and seen < 16:
        n = producers.get(cond_out)
        if n is None:  # a body initializer, or a value of the scope around (a Constant true)
            inits = {t.name: t for t in body.initializer}
            v = to_array(inits[cond_out], "a body's condition") if cond_out in inits else static.value(cond_out)
            return v is not None and bool(np.all(v))
        if n.op_type == "Identity":
            cond_out = n.input[0]
        elif n.op_type == "Constant":
            v = node_attributes(n).get("value")
            return v is not None and bool(np.all(v))
        else:
            return False
        seen += 1
    return True


def _inline_if(n: NodeProto, static: StaticValues, put: _Inliner) -> bool:
    cond = static.value(n.input[0])
    if cond is None or cond.size != 1:
        return False
    attrs = node_attributes(n)
    branch = attrs["then_branch"] if bool(cond.reshape(())) else attrs["else_branch"]
    outs = put.copy(branch, {}, n.name or n.output[0])
    for src, dst in zip(outs, n.output):
        if dst:
            put.identity(src, dst)
    return True


def _unroll_loop(n: NodeProto, static: StaticValues, put: _Inliner, opset: int) -> bool:
    body = node_attributes(n)["body"]
    ins = list(n.input) + [""] * (2 - len(n.input))
    trip = static.value(ins[0]) if ins[0] else None
    cond = static.value(ins[1]) if ins[1] else np.array(True)
    if trip is None or cond is None or trip.size != 1 or not _passes_condition(body, static):
        return False
    count = int(trip.reshape(())) if bool(np.all(cond)) else 0
    n_carried = len(body.input) - 2
    carried = list(ins[2:2 + n_carried])
    n_scan = len(body.output) - 1 - n_carried
    if count == 0 and n_scan:
        return False  # empty scan outputs have no shape to give them: left to the Loop kernel
    tag = n.name or n.output[0]
    true = put.const(np.array(True), tag + "/cond")
    scans: List[List[str]] = [[] for _ in range(n_scan)]
    for i in range(count):
        bind = {body.input[0].name: put.const(np.array(i, np.int64), "%s/iter%d" % (tag, i)),
                body.input[1].name: true}
        bind.update((f.name, v) for f, v in zip(body.input[2:], carried))
        outs = put.copy(body, bind, "%s/iter%d" % (tag, i))
        carried = outs[1:1 + n_carried]
        for k in range(n_scan):
            scans[k].append(outs[1 + n_carried + k])
    for src, dst in zip(carried, n.output[:n_carried]):
        if dst:
            put.identity(src, dst)
    for parts, dst in zip(scans, n.output[n_carried:]):
        if dst:
            put.stack(parts, 0, dst, opset)
    return True


def _unroll_scan(n: NodeProto, static: StaticValues, put: _Inliner, opset: int) -> bool:
    if opset < 9:
        return False
    a = node_attributes(n)
    body, m = a["body"], int(a["num_scan_inputs"])
    n_state = len(n.input) - m
    in_axes = list(a.get("scan_input_axes") or [0] * m)
    in_dirs = list(a.get("scan_input_directions") or [0] * m)
    n_out = len(body.output) - n_state
    out_axes = list(a.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(a.get("scan_output_directions") or [0] * n_out)
    lengths = set()
    for x, axis in zip(n.input[n_state:], in_axes):
        length = static.axis_dim(x, axis)
        if length is None:
            return False
        lengths.add(length)
    if len(lengths) != 1 or not lengths or 0 in lengths:
        return False
    steps, tag = lengths.pop(), n.name or n.output[0]
    state = list(n.input[:n_state])
    per_step: List[List[str]] = [[] for _ in range(n_out)]
    for t in range(steps):
        bind = {f.name: v for f, v in zip(body.input[:n_state], state)}
        for f, x, axis, rev in zip(body.input[n_state:], n.input[n_state:], in_axes, in_dirs):
            idx = put.const(np.array(steps - 1 - t if rev else t, np.int64), "%s/t%d" % (tag, t))
            sl = put.scope.fresh("%s/%s_t%d" % (tag, x, t))
            put.out.append(make_node("Gather", [x, idx], [sl], name=put.scope.fresh(sl), axis=axis))
            bind[f.name] = sl
        outs = put.copy(body, bind, "%s/t%d" % (tag, t))
        state = outs[:n_state]
        for k in range(n_out):
            per_step[k].append(outs[n_state + k])
    for src, dst in zip(state, n.output[:n_state]):
        if dst:
            put.identity(src, dst)
    for parts, axis, rev, dst in zip(per_step, out_axes, out_dirs, n.output[n_state:]):
        if dst:
            put.stack(parts[::-1] if rev else parts, axis, dst, opset)
    return True


def flatten_control(graph: GraphProto, opset: int) -> int:
    """Inline every If and unroll every Loop/Scan the generator can decide (in place, nested ones
    too, outermost first); returns how many nodes were replaced."""
    done = 0
    for _ in range(8):  # nesting depth
        static = StaticValues(graph, opset)
        put = _Inliner(graph, NameScope(all_names(graph) | _body_names(graph)))
        changed = 0
        for n in graph.node:
            op = n.op_type if n.domain in ("", "ai.onnx") else ""
            start = len(put.out)
            ok = (op == "If" and _inline_if(n, static, put)) or \
                (op == "Loop" and _unroll_loop(n, static, put, opset)) or \
                (op == "Scan" and _unroll_scan(n, static, put, opset))
            if ok:
                changed += 1
            else:
                del put.out[start:]
                put.out.append(n)
        graph.node = put.out
        done += changed
        if not changed:
            break
    return done


def _body_names(graph: GraphProto) -> Set[str]:
    names: Set[str] = set()
    for n in graph.node:
        for g in subgraphs(n):
            names |= all_names(g) | _body_names(g)
    return names


#: ops inside a run-time If's branches that would train differently from how they run there: the
#: generator gives training behaviour to the graph's own nodes, and the gradient branch recomputes the
#: forward (a second random draw would not be the forward's)
_BRANCH_REFUSED = ("BatchNormalization", "Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike",
                   "RandomUniformLike", "Bernoulli", "Multinomial")


def _check_if_branches(n: NodeProto, hit: Sequence[str]) -> None:
    for g in subgraphs(n):
        for m in all_nodes(g):
            if m.op_type in _BRANCH_REFUSED and m.domain in ("", "ai.onnx"):
                raise UnsupportedOpError(
                    "node %s reads %s, which would train, and its branch %r runs %s: pytrain trains through an If "
                    "decided at run time by recomputing the taken branch, which it can do only for branches "
                    "without batch statistics or random draws. Freeze what it reads (frozen_params) or export "
                    "the model with that branch fixed" % (node_label(n), ", ".join(repr(h) for h in hit[:3]),
                                                          g.name, node_label(m)))


def refuse_gradient_through(nodes: Sequence[NodeProto], trainable: Sequence[str], weights: Sequence[str] = ()) -> None:
    """Raise UnsupportedOpError naming a Loop or Scan left in ``nodes`` (in order) that reads a
    trainable parameter or a value computed from one, or whose bodies read one of ``weights`` (float
    initializers the caller did not freeze, which the trainable rule cannot see read there): no
    gradient is defined through it, and its bodies' reads are not inputs the gradient builder follows.
    An If left (decided at run time) has a gradient (pytrain/autodiff/rules/control.py) unless its
    branches hold what :func:`_check_if_branches` names; its branches are checked in turn."""
    carries, hidden = set(trainable), set(weights) | set(trainable)
    for n in nodes:
        control = n.op_type in CONTROL and n.domain in ("", "ai.onnx")
        inner = outer_names(n) if control else []
        if control and n.op_type == "If":
            hit = [r for r in inner if r in carries]
            if hit:
                _check_if_branches(n, hit)
                for g in subgraphs(n):
                    refuse_gradient_through(list(g.node), sorted(carries), sorted(hidden))
                carries.update(o for o in n.output if o)
            continue
        hit = [r for r in n.input if r in carries] + [r for r in inner if r in carries or r in hidden]
        if not hit:
            continue
        if control:
            why = {"Loop": "its trip count is decided by the data at run time (or its body may stop it early)",
                   "Scan": "its sequence length is not declared with a number"}[n.op_type]
            raise UnsupportedOpError(
                "node %s reads %s, which would train, but %s: pytrain trains through a Loop or Scan it can "
                "unroll when the training model is generated (a trip count computed from initializers and "
                "static shapes); no gradient is defined through the rest (as in ORT). Freeze what it reads "
                "(frozen_params) or export the model with that length fixed"
                % (node_label(n), ", ".join(repr(h) for h in hit[:3]), why))
        carries.update(o for o in n.output if o)
