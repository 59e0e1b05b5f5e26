"""Quantization ops: QuantizeLinear/DequantizeLinear (per-tensor, per-axis, blocked), DynamicQuantizeLinear,
MatMulInteger, ConvInteger, and onnxruntime's com.microsoft MatMulNBits and GatherBlockQuantized, the ops of
the quantized files transformers.js loads (docs/quantized.md). :mod:`pytrain.ops.quant.blocks` holds the
(de)quantization helpers the kernels and QLoRA's export share."""
from __future__ import annotations
