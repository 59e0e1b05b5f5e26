"""The training forms of quantized matmuls (QLoRA, docs/quantized.md). onnxruntime's q8 block
``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul`` becomes one ``ai.pytrain.DynamicQuantMatMul`` node
computing the same numbers, whose gradient rule (pytrain.autodiff.rules.quant) takes the gradient to the float
input through the dequantized weight (the integer tensors inside the block carry none). ``MatMul`` by a
``DequantizeLinear`` weight becomes ``ai.pytrain.DequantMatMul``, so the float weight is not kept for the
backward pass. A ``QuantizeLinear -> DequantizeLinear`` pair on an activation becomes ``ai.pytrain.FakeQuantize``
(PyTorch's fake-quantize gradient); quantization scales and zero points never train."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from pytrain.engine.quant_blocks import find_blocks
from pytrain.errors import ArtifactError
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


#: attributes a Q -> DQ pair may carry and still be one fake quantization (saturate is float8's only)
_PAIR_ATTRS = {"QuantizeLinear": ("axis", "block_size", "output_dtype", "saturate"),
               "DequantizeLinear": ("axis", "block_size")}


def _pair_of(dq: NodeProto, producers: Dict[str, NodeProto]) -> Optional[NodeProto]:
    """The QuantizeLinear feeding ``dq`` when the two are one fake quantization: the same scale and zero point
    (by name, as quantizers write the pair), axis and block size."""
    q = producers.get(dq.input[0]) if dq.input else None
    if q is None or q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx"):
        return None
    ins_q, ins_dq = list(q.input[1:]) + [""] * 2, list(dq.input[1:]) + [""] * 2
    if ins_q[:2] != ins_dq[:2] or any(a.name not in _PAIR_ATTRS[n.op_type] for n in (q, dq) for a in n.attribute):
        return None
    if any(_attr(q, k, d) != _attr(dq, k, d) for k, d in (("axis", 1), ("block_size", 0))):
        return None
    return q


def fuse_fake_quant(nodes: List[NodeProto]) -> int:
    """Each ``DequantizeLinear(QuantizeLinear(x))`` of one scale and zero point (a static QDQ model's or a
    fake-quant export's activation) as ``ai.pytrain.FakeQuantize(x, scale, zero_point)``, the same numbers,
    whose rule takes PyTorch's fake-quantize gradient; a QuantizeLinear no other node reads goes. A pair that
    is not one fake quantization stays, and its rule refuses naming it. Returns how many."""
    producers = {o: n for n in nodes for o in n.output if o}
    fused: Dict[int, NodeProto] = {}
    halves = []
    for dq in nodes:
        if dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
            continue
        q = _pair_of(dq, producers)
        if q is None:
            continue
        halves.append(q)
        attrs = {k: _attr(q, k, d) for k, d in (("axis", 1), ("block_size", 0), ("output_dtype", 0))}
        fused[id(dq)] = make_node("FakeQuantize", [q.input[0]] + list(q.input[1:3]), list(dq.output),
                                  name=(dq.name or dq.output[0]) + "/training", domain=PYTRAIN_DOMAIN, **attrs)
    kept = [fused.get(id(n), n) for n in nodes]
    read = {i for n in kept for i in n.input if i}
    gone = {id(q) for q in halves if not any(o in read for o in q.output)}
    nodes[:] = [n for n in kept if id(n) not in gone]
    return len(fused)


#: (domain, op): the input positions of a quantization op's scale and zero point, which stay frozen
QUANT_PARAMS = {("", "QuantizeLinear"): (1, 2), ("", "DequantizeLinear"): (1, 2),
                ("com.microsoft", "MatMulNBits"): (2, 3), ("com.microsoft", "GatherBlockQuantized"): (2, 3)}


def quant_params(nodes: Sequence[NodeProto]) -> Dict[str, str]:
    """{initializer or value name: what reads it as a quantization scale or zero point ("the scale of
    QuantizeLinear node 'q'")}: these never train (pytrain.generator.trainable's rule leaves them out)."""
    found: Dict[str, str] = {}
    for n in nodes:
        positions = QUANT_PARAMS.get(("" if n.domain in ("", "ai.onnx") else n.domain, n.op_type), ())
        for k, pos in enumerate(positions):
            if pos < len(n.input) and n.input[pos] and n.input[pos] not in found:
                found[n.input[pos]] = "the %s of %s node %r" % (("scale", "zero point")[k], n.op_type,
                                                                 n.name or n.output[0])
    for b in find_blocks(list(nodes)):  # a q8 block's weight scale is read by a Mul
        if b.kind == "int8" and b.scale:
            found.setdefault(b.scale, "the weight scale of the q8 matmul block %r" % (b.anchor.name or b.y))
    return found


def refuse_trained_quant_params(nodes: Sequence[NodeProto], trainable: Sequence[str]) -> None:
    """Raise ArtifactError when ``trainable`` names a quantization scale or zero point: they stay frozen. The
    gradient pytrain takes through a quantizer is PyTorch's fake-quantize gradient, which has none for them
    (PyTorch's learnable fake quantization, ``_fake_quantize_learnable_per_tensor_affine``, is another op)."""
    found = quant_params(nodes)
    for name in trainable:
        if name in found:
            raise ArtifactError(
                "%r would train, but it is %s: quantization scales and zero points stay frozen (the gradient "
                "through a quantizer is PyTorch's fake-quantize gradient, which has none for them; learnable fake "
                "quantization is another op); freeze it (frozen_params) or leave it out of requires_grad"
                % (name, found[name]))
