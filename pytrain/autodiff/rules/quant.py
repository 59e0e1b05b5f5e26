"""Gradient rules of the quantized matmuls (pytrain/ops/quant), for LoRA on a quantized base (QLoRA,
docs/quantized.md). The quantized weights are frozen, so the only gradient is the one w.r.t. the float input,
taken through the dequantized weight, ``dx = dy @ dequant(W)^T``: straight through the activation's
rounding (DynamicQuantizeLinear's round is a step function whose true derivative is zero almost everywhere).
A q8 block (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul) has integer tensors inside, so the training
model fuses it into ``ai.pytrain.DynamicQuantMatMul`` (:mod:`pytrain.autodiff.quant_forms`), whose rule is here."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient
from pytrain.ops.quant.blocks import MS_DOMAIN
from pytrain.ops.registry import PYTRAIN_DOMAIN


@gradient("MatMulNBits", domain=MS_DOMAIN, inputs=(0,))
def _matmul_nbits(b: B, n: N, dy: G) -> G:
    attrs = {k: int(n.attr(k)) for k in ("K", "N", "bits", "block_size") if n.attr(k) is not None}
    return [b.pt("MatMulNBitsGrad", dy[0], n.x(1), n.x(2), n.x(3), **attrs)]


@gradient("DynamicQuantMatMul", domain=PYTRAIN_DOMAIN, inputs=(0,))
def _dynamic_quant_matmul(b: B, n: N, dy: G) -> G:
    return [b.pt("DynamicQuantMatMulGrad", dy[0], n.x(1), n.x(2), n.x(3))]


@gradient("DequantMatMul", domain=PYTRAIN_DOMAIN, inputs=(0,))
def _dequant_matmul(b: B, n: N, dy: G) -> G:
    attrs = {k: int(n.attr(k, d)) for k, d in (("transB", 0), ("axis", 1), ("block_size", 0))}
    return [b.pt("DequantMatMulGrad", dy[0], n.x(1), n.x(2), n.x(3), **attrs)]
