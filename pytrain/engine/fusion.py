"""Plan-time rewrites that run a chain of nodes as one kernel, changing no result beyond float
rounding. The executor applies :func:`fuse` to the live nodes of every plan it builds.

One rewrite today: ``Conv [-> BatchNormalization (inference mode)] [-> Clip | Relu | HardSwish |
HardSigmoid]`` (two nodes at least) becomes one ``ai.pytrain.FusedConv`` node
(pytrain/ops/nn/op_conv_fused.py), which folds the normalisation into the convolution's weights and
bias and applies the activation in place on the fresh output: MobileNet's frozen backbone spends
more time in those BatchNormalization and activation passes over its activations than in half of
its convolutions (MobileNetV3's hard-swish and squeeze-excite convs too).

When it is valid: the intermediate tensors vanish, so nothing else may read them. A rewrite needs
* the Conv's output read by the BatchNormalization alone (not by another node, not a graph output).
  A BatchNormalization that trains has a gradient reading that tensor (to form x-hat), and so does
  a Conv whose input gradient is wanted through a trained normalisation: both stay unfused;
* the BatchNormalization in inference mode (``training_mode`` 0, no ``spatial=0``, one output);
* for the activation, the output before it read by the activation alone, in the same way (an
  activation whose gradient reads its input, as HardSigmoid's does, so stays unfused in training).
The folded scale and shift are computed from the parameters' values on every call (nothing is
cached), so parameters fed anew each step, trained or not, are always the ones used.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Set

from pytrain.engine.graph import consumers
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto import NodeProto, node_attributes
from pytrain.proto.helper import make_node

_CONV_ATTRS = frozenset(["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"])
_BN_ATTRS = frozenset(["epsilon", "momentum", "training_mode", "spatial"])


def _standard(n: NodeProto, op_type: str) -> bool:
    return n.op_type == op_type and (n.domain or "") in ("", "ai.onnx")


def _sole_reader(name: str, readers: Dict[str, List[NodeProto]], outputs: Set[str], op_type: str):
    """The one node reading ``name`` (a graph output counts as a reader) when it is an ``op_type`` taking it first."""
    found = readers.get(name, [])
    if len(found) != 1 or name in outputs:
        return None
    n = found[0]
    if not _standard(n, op_type) or not n.input or n.input[0] != name:
        return None
    return n


#: activations applied in place on the convolution's fresh output: op type -> the attributes it may carry
_ACTIVATIONS = {"Relu": frozenset(), "HardSwish": frozenset(), "HardSigmoid": frozenset(["alpha", "beta"])}


def _inference_bn(conv: NodeProto, readers: Dict[str, List[NodeProto]], outs: Set[str]):
    """The inference-mode BatchNormalization reading ``conv``'s output alone, or None."""
    bn = _sole_reader(conv.output[0], readers, outs, "BatchNormalization")
    if bn is None or len(bn.input) != 5 or not all(bn.input) or [o for o in bn.output if o] != [bn.output[0]]:
        return None
    bn_attrs = node_attributes(bn)
    if (not set(bn_attrs) <= _BN_ATTRS or bn_attrs.get("training_mode", 0)
            or not bn_attrs.get("spatial", 1)):
        return None
    return bn


def _activation(name: str, readers: Dict[str, List[NodeProto]], outs: Set[str]):
    """The Clip (opset >= 11 form) or activation reading ``name`` alone, or None."""
    clip = _sole_reader(name, readers, outs, "Clip")
    if clip is not None:
        ok = len(clip.output) == 1 and len(clip.input) <= 3 and not node_attributes(clip)
        return clip if ok else None  # (opset < 11 Clip has min/max attributes)
    for op, allowed in _ACTIVATIONS.items():
        act = _sole_reader(name, readers, outs, op)
        if act is not None:
            return act if len(act.output) == 1 and set(node_attributes(act)) <= allowed else None
    return None


def _fused_node(conv: NodeProto, bn, act) -> NodeProto:
    chain = [n for n in (conv, bn, act) if n is not None]
    b_in = conv.input[2] if len(conv.input) > 2 else ""
    is_clip = act is not None and act.op_type == "Clip"
    clip_in = (list(act.input[1:]) + ["", ""])[:2] if is_clip else ["", ""]
    attrs = dict(node_attributes(conv))
    bn_in = ["", "", "", ""]
    if bn is not None:
        attrs["epsilon"] = node_attributes(bn).get("epsilon", 1e-5)
        bn_in = list(bn.input[1:])
    attrs["clip"] = 1 if is_clip else 0
    if act is not None and not is_clip:
        attrs["activation"] = act.op_type
        if act.op_type == "HardSigmoid":
            act_attrs = node_attributes(act)
            attrs["alpha"] = float(act_attrs.get("alpha", 0.2))
            attrs["beta"] = float(act_attrs.get("beta", 0.5))
    name = "+".join([conv.name or conv.output[0]] + [n.op_type for n in chain[1:]])
    return make_node("FusedConv", [conv.input[0], conv.input[1], b_in] + bn_in + clip_in,
                     [chain[-1].output[0]], name=name, domain=PYTRAIN_DOMAIN, **attrs)


def fuse(nodes: List[NodeProto], outputs: Sequence[str]) -> List[NodeProto]:
    """``nodes`` (in topological order) with every fusable Conv [-> BatchNormalization] [-> Clip |
    Relu | HardSwish | HardSigmoid] chain (at least two nodes) replaced by one FusedConv node,
    placed where the chain's last node was (all of the chain's inputs exist by then). Returns
    ``nodes`` itself when nothing fuses."""
    readers, outs = consumers(nodes), set(outputs)
    pos = {id(n): k for k, n in enumerate(nodes)}
    replace: Dict[int, NodeProto] = {}
    drop: Set[int] = set()
    for conv in nodes:
        if not _standard(conv, "Conv") or len(conv.output) != 1 or not (2 <= len(conv.input) <= 3):
            continue
        if not set(node_attributes(conv)) <= _CONV_ATTRS:
            continue  # an attribute Conv's kernel refuses: let the unfused node say so
        bn = _inference_bn(conv, readers, outs)
        act = _activation((bn or conv).output[0], readers, outs)
        if bn is None and act is None:
            continue
        chain = [n for n in (conv, bn, act) if n is not None]
        idx = [pos[id(n)] for n in chain]
        replace[idx[-1]] = _fused_node(conv, bn, act)
        drop.update(idx[:-1])
    if not replace:
        return nodes
    return [replace.get(k, n) for k, n in enumerate(nodes) if k not in drop]
