"""pytrain's training forms of the quantized matmul blocks (docs/quantized.md, QLoRA):

* ``DynamicQuantMatMul(x, w, w_scale, w_zero_point?)``: onnxruntime's ``quantize_dynamic`` block as one node,
  ``DynamicQuantizeLinear(x) -> MatMulInteger -> Cast -> Mul(x_scale * w_scale)``, computing the same numbers
  (the training model fuses the block so the gradient can reach ``x``; the eval model keeps the block);
* ``DynamicQuantMatMulGrad(dy, w, w_scale, w_zero_point?)`` and ``MatMulNBitsGrad(dy, B, scales, zero_points?)``:
  the gradient w.r.t. the float input, ``dy @ dequant(W)^T``: straight through the activation's rounding,
  as QLoRA takes it (the weights are frozen, so this is the only gradient the block gives);
* ``DequantMatMul(x, q, scale, zero_point?)`` and its ``DequantMatMulGrad``: ``MatMul(x, DequantizeLinear(q))``
  (a tied lm_head of a q8 file, QDQ weights), the float weight recomputed in the backward pass, never kept."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.quant.blocks import NBitsLayout, nbits_dequantize
from pytrain.ops.quant.op_dynamic_quantize_linear import dynamic_quantize_linear
from pytrain.ops.quant.op_matmul_integer import matmul_integer
from pytrain.ops.quant.op_quantize_linear import dequantize_linear
from pytrain.ops.registry import PYTRAIN_DOMAIN, kernel


def int8_dequantize(w: np.ndarray, w_scale: np.ndarray, w_zero_point) -> np.ndarray:
    """The float (K, N) weight of a MatMulInteger block: ``(w - zero_point) * scale``, the scale and zero point
    per tensor or per output column."""
    d = w.astype(np.int16)
    if w_zero_point is not None:
        d = d - w_zero_point.astype(np.int16)
    return d.astype(np.float32) * w_scale.astype(np.float32)


@kernel("DynamicQuantMatMul", domain=PYTRAIN_DOMAIN)
def dynamic_quant_matmul(ctx, x, w, w_scale, w_zero_point=None):
    xq, x_scale, x_zero_point = dynamic_quantize_linear(ctx, x)
    (y,) = matmul_integer(ctx, xq, w, x_zero_point, w_zero_point)
    return (y.astype(np.float32) * (x_scale * w_scale).astype(np.float32),)


def _input_grad(dy: np.ndarray, w_t: np.ndarray) -> np.ndarray:
    return np.asarray(linalg.matmul(dy, w_t), dtype=dy.dtype)


@kernel("DynamicQuantMatMulGrad", domain=PYTRAIN_DOMAIN)
def dynamic_quant_matmul_grad(ctx, dy, w, w_scale, w_zero_point=None):
    if dy.shape[-1] != w.shape[-1]:
        raise InputError("DynamicQuantMatMulGrad: dy %s does not end in N=%d" % (list(dy.shape), w.shape[-1]))
    return (_input_grad(dy, linalg.transposed(int8_dequantize(w, w_scale, w_zero_point))),)


@kernel("MatMulNBitsGrad", domain=PYTRAIN_DOMAIN)
def matmul_nbits_grad(ctx, dy, B, scales, zero_points=None, *, K=0, N=0, bits=4, block_size=0):
    w = nbits_dequantize(B, scales, zero_points, NBitsLayout(int(K), int(N), int(bits), int(block_size)))
    return (_input_grad(dy, np.ascontiguousarray(w, dtype=dy.dtype)),)


def _dequantized(ctx, q, scale, zero_point, transB, axis, block_size) -> np.ndarray:
    (w,) = dequantize_linear(ctx, q, scale, zero_point, axis=axis, block_size=block_size)
    return linalg.transposed(w) if transB else w


@kernel("DequantMatMul", domain=PYTRAIN_DOMAIN)
def dequant_matmul(ctx, x, q, scale, zero_point=None, *, transB=0, axis=1, block_size=0):
    """The training form of ``MatMul(x, DequantizeLinear(q))`` (``transB``: of ``Transpose(q)``), the weight
    dequantized per call so the backward pass recomputes it instead of keeping a float copy alive."""
    w = _dequantized(ctx, q, scale, zero_point, int(transB), axis, block_size)
    return (np.asarray(linalg.matmul(x, w), dtype=x.dtype),)


@kernel("DequantMatMulGrad", domain=PYTRAIN_DOMAIN)
def dequant_matmul_grad(ctx, dy, q, scale, zero_point=None, *, transB=0, axis=1, block_size=0):
    w = _dequantized(ctx, q, scale, zero_point, 1 - int(transB), axis, block_size)
    return (_input_grad(dy, w),)
