"""com.microsoft GatherBlockQuantized (onnxruntime's contrib op, contrib_ops/cpu/quantization/
gather_block_quantized.cc): Gather of rows of a block-quantized table, dequantized. pytrain reads the uint8
form (2, 4 or 8 bits packed along the last axis, the quantized axis; gather_axis 0; zero points packed the
same way, ``2**(bits-1)`` when absent). int4/uint4 tables have no numpy type and are refused where the
model's tensors are read. An index out of range is an error (onnxruntime writes zeros for it)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.common import norm_axis
from pytrain.ops.quant.blocks import MS_DOMAIN, unpack_bits
from pytrain.ops.registry import kernel


def _check(op: str, data: np.ndarray, scales: np.ndarray, gather_axis: int, quantize_axis: int,
           block_size: int, bits: int) -> int:
    """The unpacked length of the quantized (last) axis, after checking the layout."""
    if data.dtype != np.uint8:
        raise InputError("%s: data is %s; pytrain reads uint8 data" % (op, data.dtype))
    if bits not in (2, 4, 8):
        raise InputError("%s: bits must be 2, 4 or 8 for uint8 data, got %d" % (op, bits))
    if block_size < 16 or block_size & (block_size - 1):
        raise InputError("%s: block_size must be a power of 2 >= 16, got %d" % (op, block_size))
    rank = data.ndim
    if rank < 2 or norm_axis(op, gather_axis, rank, "gather_axis", InputError) != 0 \
            or norm_axis(op, quantize_axis, rank, "quantize_axis", InputError) != rank - 1:
        raise InputError("%s: uint8 data takes gather_axis 0 and quantize_axis the last axis, got %d and %d "
                         "for data of rank %d" % (op, gather_axis, quantize_axis, rank))
    length = data.shape[-1] * (8 // bits)
    want = data.shape[:-1] + (-(-length // block_size),)
    if scales.shape != want:
        raise InputError("%s: scales must have shape %s, got %s" % (op, list(want), list(scales.shape)))
    return length


@kernel("GatherBlockQuantized", domain=MS_DOMAIN)
def gather_block_quantized(ctx, data, indices, scales, zero_points=None, *, gather_axis=0, quantize_axis=1,
                           block_size=128, bits=4):
    op = "GatherBlockQuantized"
    bits, block_size = int(bits), int(block_size)
    length = _check(op, data, scales, int(gather_axis), int(quantize_axis), block_size, bits)
    if indices.dtype.kind not in "iu":
        raise InputError("%s: indices must be integers, got %s" % (op, indices.dtype))
    rows = data.shape[0]
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -rows or idx.max() >= rows):
        raise InputError("%s: node %s: an index is out of range [-%d, %d)" % (op, ctx.node_name, rows, rows))
    idx = np.where(idx < 0, idx + rows, idx).reshape(-1)
    q = unpack_bits(data[idx], bits, length).astype(np.int16)
    s = scales[idx]
    if zero_points is None:
        zp = np.int16(1 << (bits - 1))
    else:
        nb = scales.shape[-1]
        if zero_points.dtype != np.uint8 or zero_points.shape != scales.shape[:-1] + (-(-nb * bits // 8),):
            raise InputError("%s: zero_points must be uint8 packed like data, shape %s, got %s %s" % (
                op, list(scales.shape[:-1] + (-(-nb * bits // 8),)), zero_points.dtype, list(zero_points.shape)))
        zp = np.repeat(unpack_bits(zero_points[idx], bits, nb), block_size, axis=-1)[..., :length].astype(np.int16)
    w = (q - zp).astype(np.float32) * np.repeat(s.astype(np.float32), block_size, axis=-1)[..., :length]
    out = w.astype(scales.dtype).reshape(indices.shape + data.shape[1:-1] + (length,))
    return (out,)
