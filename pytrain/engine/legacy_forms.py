"""Plan-time rewrite of the old opsets' broadcasting, so no arithmetic kernel carries an opset's past.

Add, Sub, Mul, Div and Pow of opsets 1-6 broadcast by their ``broadcast``/``axis`` attributes (B matched
to A's dims from ``axis``). Each plan the executor builds puts an ``ai.pytrain.LegacyBroadcast`` node
(pytrain/ops/elementwise/legacy_broadcast.py: B aligned to A, with the spec's checks) before such a node,
which then reads the aligned B without the attributes: today's op, numpy's broadcasting. The model file,
its gradient nodes (pytrain/autodiff/rules/elementwise.py reads the attributes) and every export keep
the node as written, which is what its opset means; only plans see the rewrite, as with
:mod:`pytrain.engine.fusion`."""
from __future__ import annotations

from typing import List, Sequence

from pytrain.engine.graph import NameScope
from pytrain.ops.elementwise.legacy_broadcast import OPS
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto import NodeProto, node_attributes
from pytrain.proto.helper import make_node


def align_legacy_broadcasts(nodes: Sequence[NodeProto], taken: Sequence[str]) -> List[NodeProto]:
    """``nodes`` with each Add/Sub/Mul/Div/Pow carrying attributes (opset 1-6's ``broadcast``, ``axis``,
    ``consumed_inputs``, or any other: the LegacyBroadcast kernel refuses those by name) split into its B's
    alignment and the bare op; ``taken``: the names already in use."""
    out: List[NodeProto] = []
    scope = None
    for n in nodes:
        if n.op_type not in OPS or n.domain not in ("", "ai.onnx") or not n.attribute or len(n.input) != 2:
            out.append(n)
            continue
        if scope is None:
            scope = NameScope(taken)
            for m in nodes:
                scope.taken.update(m.input)
                scope.taken.update(m.output)
        label = n.name or (n.output[0] if n.output else n.op_type)
        aligned = scope.fresh(label + "/aligned_B")
        out.append(make_node("LegacyBroadcast", list(n.input), [aligned], name=label, domain=PYTRAIN_DOMAIN,
                             op=n.op_type, **node_attributes(n)))
        out.append(make_node(n.op_type, [n.input[0], aligned], list(n.output), name=n.name))
    return out
