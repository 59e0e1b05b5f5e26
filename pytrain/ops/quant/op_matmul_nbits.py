"""com.microsoft MatMulNBits (onnxruntime's contrib op, contrib_ops/cpu/quantization/matmul_nbits.cc): ``A @ W^T
(+ bias)`` with W (N, K) stored as ``bits``-bit blocks of ``block_size`` values along K, a scale per block
and optional zero points (packed uint8, or floats like the scales). The weight is dequantized per call and
dropped after it, so it is held quantized between calls. ``accuracy_level`` is the lowest precision
onnxruntime may compute in; pytrain computes in float32, the most accurate level. ``g_idx`` (act-order
GPTQ) is refused."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops import linalg
from pytrain.ops.quant.blocks import MS_DOMAIN, NBitsLayout, nbits_dequantize
from pytrain.ops.registry import kernel


@kernel("MatMulNBits", domain=MS_DOMAIN)
def matmul_nbits(ctx, A, B, scales, zero_points=None, g_idx=None, bias=None, *, K=0, N=0, bits=4, block_size=0,
                 accuracy_level=0):
    op = "MatMulNBits"
    if g_idx is not None:
        raise InputError("%s: node %s has a g_idx input (act-order GPTQ), which pytrain does not read"
                         % (op, ctx.node_name))
    lay = NBitsLayout(int(K), int(N), int(bits), int(block_size))
    if A.ndim < 1 or A.shape[-1] != lay.K:
        raise InputError("%s: A %s must end in K=%d" % (op, list(A.shape), lay.K))
    if A.dtype != scales.dtype:
        raise InputError("%s: A is %s and scales %s; they must be of one float type" % (op, A.dtype, scales.dtype))
    w = nbits_dequantize(B, scales, zero_points, lay)
    y = np.asarray(linalg.matmul(A, linalg.transposed(w)), dtype=A.dtype)
    if bias is not None:
        if bias.shape != (lay.N,):
            raise InputError("%s: bias must have shape (%d,), got %s" % (op, lay.N, list(bias.shape)))
        y = y + bias
    return (y,)
