"""Gradient rules of the quantized matmuls (pytrain/ops/quant), for LoRA on a quantized base (QLoRA,
docs/quantized.md). The quantized weights are frozen, so the only gradient is the one w.r.t. the float input,
taken through the dequantized weight, ``dx = dy @ dequant(W)^T``: straight through the activation's
rounding (DynamicQuantizeLinear's round is a step function whose true derivative is zero almost everywhere).
A q8 block (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul) has integer tensors inside, so the training
model fuses it into ``ai.pytrain.DynamicQuantMatMul`` (:mod:`pytrain.autodiff.quant_forms`), whose rule is here.
A QuantizeLinear -> DequantizeLinear pair on an activation trains as ``ai.pytrain.FakeQuantize``: PyTorch's
fake-quantize gradient, the straight-through estimator masked to the representable range."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient
from pytrain.engine.graph import node_label
from pytrain.errors import UnsupportedOpError
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


def _fake_attrs(n: N) -> dict:
    return {k: int(n.attr(k, d)) for k, d in (("axis", 1), ("block_size", 0), ("output_dtype", 0))}


@gradient("FakeQuantize", domain=PYTRAIN_DOMAIN, inputs=(0,))
def _fake_quantize(b: B, n: N, dy: G) -> G:
    return [b.pt("FakeQuantizeGrad", dy[0], n.x(0), n.x(1), n.x(2), **_fake_attrs(n))]


def _refuse_unpaired(b: B, n: N, dy: G) -> G:
    raise UnsupportedOpError(
        "node %s lies between trainable parameters and the loss: a gradient passes a QuantizeLinear only into a "
        "DequantizeLinear that reads its output with the same scale and zero point (by name), axis and block_size "
        "(fake quantization, trained with PyTorch's straight-through fake-quantize gradient); this one is not such "
        "a pair (its integer output carries no gradient)" % node_label(n.node))


# the scale and zero point are never differentiable (they stay frozen: quant_forms.refuse_trained_quant_params);
# a pair of one scale trains as FakeQuantize, any other Q / DQ on the loss path is refused by name
gradient("QuantizeLinear", inputs=(0,))(_refuse_unpaired)
gradient("DequantizeLinear", inputs=(0,))(_refuse_unpaired)
