"""The quantized matmul blocks of onnxruntime's quantizers, found in a graph: ``quantize_dynamic``'s q8 block
``DynamicQuantizeLinear(x) -> MatMulInteger(x_q, w, x_zp, w_zp?) -> Cast(float) -> Mul(., Mul(x_scale, w_scale))``
and ``MatMul4BitsQuantizer``'s com.microsoft MatMulNBits. QLoRA attaches adapters to them, the training model
fuses the q8 block (pytrain.autodiff.quant_forms) and the export merges into them."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from pytrain.base import dtypes
from pytrain.engine.graph import consumers, producers
from pytrain.ops.quant.blocks import MS_DOMAIN
from pytrain.proto import NodeProto


class QuantBlock:
    """One quantized matmul ``y = x @ dequant(W)`` (+ bias for MatMulNBits): its float input ``x`` and output
    ``y``, the weight ``w`` (int8/uint8 (K, N), or MatMulNBits' packed B), its ``scale`` and ``zero_point``
    (or ""), ``kind`` "int8" or "nbits", the node producing ``y`` and the names of the block's nodes."""

    __slots__ = ("kind", "x", "y", "w", "scale", "zero_point", "anchor", "last", "nodes", "k", "n")

    def __init__(self, kind: str, x: str, w: str, scale: str, zero_point: str, anchor: NodeProto,
                 last: NodeProto, nodes: Sequence[NodeProto]) -> None:
        self.kind, self.x, self.w, self.scale, self.zero_point = kind, x, w, scale, zero_point
        self.y = last.output[0]
        self.anchor = anchor      # the MatMulInteger / MatMulNBits node (names the layer)
        self.last = last          # the node writing y
        self.nodes = list(nodes)  # the block's nodes writing nothing else read (DynamicQuantizeLinear may be shared)
        self.k = self.n = 0


def _int8_block(mmi: NodeProto, producers: Dict[str, NodeProto],
                readers: Dict[str, List[NodeProto]]) -> Optional[QuantBlock]:
    dql = producers.get(mmi.input[0])
    if dql is None or dql.op_type != "DynamicQuantizeLinear" or dql.domain not in ("", "ai.onnx"):
        return None
    if len(mmi.input) < 3 or mmi.input[2] != dql.output[2] or mmi.input[1] in producers:
        return None
    cast = readers.get(mmi.output[0], [])
    if len(cast) != 1 or cast[0].op_type != "Cast" or int(next((a.i for a in cast[0].attribute if a.name == "to"), 0)) \
            != dtypes.FLOAT:
        return None
    mul = readers.get(cast[0].output[0], [])
    if len(mul) != 1 or mul[0].op_type != "Mul":
        return None
    other = [i for i in mul[0].input if i != cast[0].output[0]]
    scales = producers.get(other[0]) if len(other) == 1 else None
    if scales is None or scales.op_type != "Mul" or dql.output[1] not in scales.input:
        return None
    w_scale = [i for i in scales.input if i != dql.output[1]]
    if len(w_scale) != 1 or w_scale[0] in producers:
        return None
    zp = mmi.input[3] if len(mmi.input) > 3 else ""
    nodes = [mmi, cast[0], mul[0]] + ([scales] if len(readers.get(scales.output[0], [])) == 1 else [])
    return QuantBlock("int8", dql.input[0], mmi.input[1], w_scale[0], zp, mmi, mul[0], nodes)


def find_blocks(nodes: Sequence[NodeProto]) -> List[QuantBlock]:
    """Every quantized matmul block of ``nodes``, in graph order."""
    made, readers = producers(nodes), consumers(nodes)
    found: List[QuantBlock] = []
    for n in nodes:
        if n.op_type == "MatMulInteger" and n.domain in ("", "ai.onnx"):
            block = _int8_block(n, made, readers)
            if block is not None:
                found.append(block)
        elif n.op_type == "MatMulNBits" and n.domain == MS_DOMAIN and len(n.input) > 2:
            if len(n.input) > 4 and n.input[4]:
                continue  # g_idx: refused by the kernel anyway
            attrs = {a.name: a.i for a in n.attribute}
            block = QuantBlock("nbits", n.input[0], n.input[1], n.input[2],
                               n.input[3] if len(n.input) > 3 else "", n, n, [n])
            block.k, block.n = int(attrs.get("K", 0)), int(attrs.get("N", 0))
            found.append(block)
    return found
