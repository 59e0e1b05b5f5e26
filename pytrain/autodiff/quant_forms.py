"""The training forms of quantized matmuls (QLoRA, docs/quantized.md). onnxruntime's q8 block
``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul`` becomes one ``ai.pytrain.DynamicQuantMatMul`` node
computing the same numbers, whose gradient rule (pytrain.autodiff.rules.quant) takes the gradient to the float
input through the dequantized weight (the integer tensors inside the block carry none). ``MatMul`` by a
``DequantizeLinear`` weight becomes ``ai.pytrain.DequantMatMul``, so the float weight is not kept for the
backward pass."""
from __future__ import annotations

from typing import Dict, List

from pytrain.engine.quant_blocks import find_blocks
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


def _attr(n: NodeProto, name: str, default: int) -> int:
    return int(next((a.i for a in n.attribute if a.name == name), default))


def fuse_dequantized_weights(nodes: List[NodeProto]) -> int:
    """``MatMul(x, DequantizeLinear(q))`` and ``MatMul(x, DequantizeLinear(Transpose(q)))`` (per-tensor; a tied
    lm_head in a q8 file) as ``ai.pytrain.DequantMatMul``, whose backward recomputes the float weight instead of
    keeping it alive from the forward pass (a GPT-2's 50257 x 768 table is 147 MiB). Returns how many."""
    producers = {o: n for n in nodes for o in n.output if o}
    readers: Dict[str, List[NodeProto]] = {}
    for n in nodes:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    fused: Dict[int, NodeProto] = {}
    drop = set()
    for mm in nodes:
        if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx") or len(mm.input) != 2:
            continue
        dq = producers.get(mm.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or len(readers.get(dq.output[0], [])) != 1:
            continue
        q, trans = dq.input[0], 0
        t = producers.get(q)
        if t is not None:
            perm = [list(a.ints) for a in t.attribute if a.name == "perm"]
            if t.op_type != "Transpose" or (perm and perm[0] != [1, 0]) or len(readers.get(q, [])) != 1 \
                    or t.input[0] in producers or _attr(dq, "block_size", 0):
                continue
            q, trans = t.input[0], 1   # per-tensor only: the kernel checks the scale's shape
            drop.add(id(t))
        drop.add(id(dq))
        axis = _attr(dq, "axis", 1)
        fused[id(mm)] = make_node("DequantMatMul", [mm.input[0], q] + list(dq.input[1:]), list(mm.output),
                                  name=(mm.name or mm.output[0]) + "/training", domain=PYTRAIN_DOMAIN, transB=trans,
                                  axis=1 - axis % 2 if trans else axis, block_size=_attr(dq, "block_size", 0))
    nodes[:] = [fused.get(id(n), n) for n in nodes if id(n) not in drop]
    return len(fused)
