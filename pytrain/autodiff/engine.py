"""Reverse-mode differentiation of an ONNX graph: emits the backward nodes that compute the
gradient of one scalar (or summed) loss with respect to the chosen parameters."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from pytrain.autodiff.builder import GradBuilder
from pytrain.autodiff.registry import NON_DIFFERENTIABLE, TRAINING_FORM, ForwardNode
from pytrain.autodiff.rules import differentiable_ops, get_rule
from pytrain.errors import UnsupportedOpError
from pytrain.engine.graph import NameScope, node_label, topological_order
from pytrain.base.layout import grad_name
from pytrain.ops.control.subgraph import outer_names
from pytrain.proto import NodeProto


def gradient_inputs(node: NodeProto) -> List[str]:
    """What a gradient may flow to from ``node``: its inputs and, for an If, the enclosing scopes'
    values its branches read (ORT's implicit inputs), which its rule gives gradients like inputs."""
    if node.op_type == "If" and node.domain in ("", "ai.onnx"):
        return list(node.input) + outer_names(node)
    return list(node.input)


def differentiable_inputs(node: NodeProto) -> List[int]:
    """Positions of :func:`gradient_inputs` through which gradient can flow (empty for non-differentiable ops)."""
    if node.op_type in NON_DIFFERENTIABLE and not node.domain:
        return []
    domain, op = TRAINING_FORM.get((node.domain or "", node.op_type), (node.domain or "", node.op_type))
    rule = get_rule(op, domain)
    ins = gradient_inputs(node)
    if rule is None:
        return list(range(len(ins)))  # unknown: assume it would, so we can report it
    if rule.when is not None and not rule.when(ForwardNode(node, [], None)):
        return []
    return [i for i in range(len(ins)) if rule.input_differentiable(i)]


def carried(nodes: Sequence[NodeProto], params: Iterable[str],
            diff: Optional[Dict[int, List[int]]] = None) -> Set[str]:
    """The tensors that depend differentiably on ``params`` (``nodes`` in topological order): a node's
    differentiable outputs carry a gradient when one of its differentiable inputs does; its other outputs
    (MaxPool's or TopK's indices, BatchNormalization's running statistics, Dropout's mask) do not.
    ``diff``: each node's :func:`differentiable_inputs` by ``id``, when the caller has them already."""
    carries: Set[str] = set(params)
    for n in nodes:
        ins = diff[id(n)] if diff is not None else differentiable_inputs(n)
        names = gradient_inputs(n) if ins else []
        if any(names[i] in carries for i in ins if i < len(names) and names[i]):
            rule = get_rule(n.op_type, n.domain or "")
            outs = n.output if rule is None else [o for i, o in enumerate(n.output) if rule.output_differentiable(i)]
            carries.update(o for o in outs if o)
    return carries


def backward(b: GradBuilder, nodes: Sequence[NodeProto], available: Iterable[str], seeds: Dict[str, List[str]],
             wrt: Sequence[str]) -> Tuple[Dict[str, Optional[str]], Set[str]]:
    """Append to ``b`` the nodes computing the gradient of each name in ``wrt`` given the gradients
    ``seeds`` of some of ``nodes``' values (summed where a value has several); returns {name: its
    gradient, None where none reaches it} and the forward values that depend on ``wrt``. Raises
    UnsupportedOpError naming the first node on a path that has no gradient rule."""
    order = topological_order(nodes, available)
    diff = {id(n): differentiable_inputs(n) for n in order}  # each rule (and attribute) read once
    ins = {id(n): gradient_inputs(n) for n in order}
    carries = carried(order, wrt, diff)   # forward sweep: which tensors depend differentiably on a parameter
    # backward sweep: which of those reach the seeds
    reaches: Set[str] = set(seeds)
    relevant: List[NodeProto] = []
    for n in reversed(order):
        names = ins[id(n)]
        if any(o in reaches for o in n.output if o) and any(
                names[i] in carries for i in diff[id(n)] if names[i]):
            relevant.append(n)
            reaches.update(names[i] for i in diff[id(n)] if names[i] in carries)
    grads: Dict[str, List[str]] = {k: list(v) for k, v in seeds.items()}

    def total(name: str) -> Optional[str]:
        parts = grads.get(name)
        if not parts:
            return None
        if len(parts) > 1:
            grads[name] = [b.op("Sum", *parts)]
        return grads[name][0]

    for n in relevant:  # already in reverse topological order
        rule = get_rule(n.op_type, n.domain or "")
        if rule is None:
            raise UnsupportedOpError(
                "node %s has no gradient rule, and it lies between trainable parameters and the "
                "loss; freeze the parameters before it or use ops with gradients: %s"
                % (node_label(n), ", ".join(differentiable_ops())))
        dys = [total(o) if o and rule.output_differentiable(i) else None for i, o in enumerate(n.output)]
        if all(d is None for d in dys):
            continue
        names = ins[id(n)]
        needs = [bool(x) and x in carries and x in reaches and i in diff[id(n)] for i, x in enumerate(names)]
        dxs = rule.fn(b, ForwardNode(n, needs, b.scope), dys)
        for i, dx in enumerate(dxs):
            if dx is not None and needs[i]:
                grads.setdefault(names[i], []).append(dx)
    return {p: total(p) for p in wrt}, carries


def build_gradients(nodes: Sequence[NodeProto], available: Iterable[str], loss: str,
                    params: Sequence[str], scope: NameScope) -> GradBuilder:
    """Append to a GradBuilder the nodes computing ``<param>_grad`` for every name in ``params``.

    ``nodes`` is the forward graph (its nodes may gain outputs that rules need to save).
    Raises UnsupportedOpError naming the first node on a loss path that has no gradient rule.
    """
    b = GradBuilder(scope, backward)
    seed = b.op("Expand", b.scalar(1.0, loss), b.op("Shape", loss))
    found, carries = backward(b, nodes, available, {loss: [seed]}, params)
    produced = {o: n for n in b.nodes for o in n.output}
    read = {i for n in b.nodes for i in n.input}
    renamed: Dict[str, str] = {}
    for p in params:
        g = found[p]
        if g is None:  # the parameter does not influence the loss: its gradient is zero
            g = b.zeros_like(p)
            produced[g] = b.nodes[-1]
        node = produced.pop(g, None)
        if node is not None and g not in read and g not in carries:
            # name the gradient where it is computed rather than through an extra Identity
            node.output[list(node.output).index(g)] = grad_name(p)
            renamed[g] = grad_name(p)
        else:
            b.op("Identity", renamed.get(g, g), out_names=[grad_name(p)])
    return b
