"""Plan-time rewrite of the old opsets' broadcasting, so no arithmetic or Gemm kernel carries an opset's past.

Add, Sub, Mul, Div and Pow of opsets 1-6 broadcast by their ``broadcast``/``axis`` attributes (B matched
to A's dims from ``axis``). Each plan the executor builds puts an ``ai.pytrain.LegacyBroadcast`` node
(pytrain/ops/elementwise/legacy_broadcast.py: B aligned to A, with the spec's checks) before such a node,
which then reads the aligned B without the attributes: today's op, numpy's broadcasting; likewise a Gemm-1/6
reads C as Gemm-7 does (C checked to have the output's shape first unless ``broadcast=1``). The model file,
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


def align_legacy_broadcasts(nodes: Sequence[NodeProto], taken: Sequence[str], opset: int) -> List[NodeProto]:
    """``nodes`` with each Add/Sub/Mul/Div/Pow carrying attributes (opset 1-6's ``broadcast``, ``axis``,
    ``consumed_inputs``, or any other: the LegacyBroadcast kernel refuses those by name) split into its B's
    alignment and the bare op, and each Gemm of an ``opset`` before 7 made Gemm-7 (its C checked against the
    output's shape first unless ``broadcast=1``); ``taken``: the names already in use."""
    if not any(_legacy(n, opset) for n in nodes):   # (today's models: no name scope built for nothing)
        return list(nodes)
    out: List[NodeProto] = []
    scope = NameScope(taken)
    for m in nodes:
        scope.taken.update(m.input)
        scope.taken.update(m.output)
    for n in nodes:
        if not _legacy(n, opset):
            out.append(n)
        elif n.op_type in OPS:
            aligned = scope.fresh(_label(n) + "/aligned_B")
            out.append(make_node("LegacyBroadcast", list(n.input), [aligned], name=_label(n), domain=PYTRAIN_DOMAIN,
                                 op=n.op_type, **node_attributes(n)))
            out.append(make_node(n.op_type, [n.input[0], aligned], list(n.output), name=n.name))
        else:
            out += _gemm_7(n, scope)
    return out


def _legacy(n: NodeProto, opset: int) -> bool:
    """An Add/Sub/Mul/Div/Pow carrying attributes, or a Gemm of an opset before 7."""
    if n.domain not in ("", "ai.onnx"):
        return False
    return (n.op_type in OPS and bool(n.attribute) and len(n.input) == 2) or (n.op_type == "Gemm" and opset < 7)


def _label(n: NodeProto) -> str:
    return n.name or (n.output[0] if n.output else n.op_type)


def _gemm_7(n: NodeProto, scope: NameScope) -> List[NodeProto]:
    """Gemm-1/6 as Gemm-7: ``broadcast=1`` is Gemm-7's broadcast; without it, C is checked first."""
    attrs = node_attributes(n)
    if int(attrs.pop("broadcast", 0) or 0) or len(n.input) < 3 or not n.input[2]:
        return [make_node("Gemm", list(n.input), list(n.output), name=n.name, **attrs)]
    checked = scope.fresh(_label(n) + "/checked_C")
    check = make_node("LegacyBroadcast", list(n.input[:3]), [checked], name=_label(n), domain=PYTRAIN_DOMAIN,
                      op="Gemm", transA=attrs.get("transA"), transB=attrs.get("transB"))
    return [check, make_node("Gemm", [n.input[0], n.input[1], checked], list(n.output), name=n.name, **attrs)]
