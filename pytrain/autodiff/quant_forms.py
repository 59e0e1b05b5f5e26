"""The training form of onnxruntime's q8 matmul block (QLoRA, docs/quantized.md): ``DynamicQuantizeLinear ->
MatMulInteger -> Cast -> Mul`` becomes one ``ai.pytrain.DynamicQuantMatMul`` node computing the same numbers,
whose gradient rule (pytrain.autodiff.rules.quant) takes the gradient to the float input through the
dequantized weight. The integer tensors inside the block carry no gradient; fused, the block does."""
from __future__ import annotations

from typing import List

from pytrain.ops.quant.patterns import find_blocks
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.proto import NodeProto, make_node


def fuse_int8_blocks(nodes: List[NodeProto]) -> int:
    """Replace each q8 block of ``nodes`` (in place) by its training form; a DynamicQuantizeLinear no other node
    reads any more goes too. Returns the number of blocks fused."""
    blocks = [b for b in find_blocks(nodes) if b.kind == "int8"]
    if not blocks:
        return 0
    drop = {id(n) for b in blocks for n in b.nodes}
    fused = {id(b.last): make_node("DynamicQuantMatMul", [b.x, b.w, b.scale] + ([b.zero_point] if b.zero_point else []),
                                   [b.y], name=(b.anchor.name or b.y) + "/training", domain=PYTRAIN_DOMAIN)
             for b in blocks}
    kept = [fused.get(id(n), n) for n in nodes if id(n) not in drop or id(n) in fused]
    read = {i for n in kept for i in n.input if i}
    kept = [n for n in kept if not (n.op_type == "DynamicQuantizeLinear" and not any(o in read for o in n.output))]
    nodes[:] = kept
    return len(blocks)
