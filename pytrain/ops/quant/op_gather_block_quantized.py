"""com.microsoft GatherBlockQuantized (onnxruntime's contrib op, contrib_ops/cpu/quantization/
gather_block_quantized.cc): Gather of a block-quantized table, dequantized. Two forms: uint8 data (2, 4 or 8
bits packed along the last axis, the quantized axis; gather_axis 0; zero points packed the same way,
``2**(bits-1)`` when absent, MatMulNBits' convention), and int4 / uint4 data (any gather and quantize axes; zero
points of the data's type, 0 when absent). An index out of range is an error (onnxruntime writes zeros for it)."""
from __future__ import annotations

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.ops.common import norm_axis
from pytrain.ops.quant.blocks import MS_DOMAIN, unpack_bits
from pytrain.ops.registry import kernel


def _check(op: str, data: np.ndarray, scales: np.ndarray, gather_axis: int, quantize_axis: int,
           block_size: int, bits: int) -> int:
    """The unpacked length of the quantized (last) axis, after checking the layout."""
    if data.dtype != np.uint8:
        raise InputError("%s: data is %s; pytrain reads uint8, int4 and uint4 data" % (op, data.dtype))
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


def _flat_indices(ctx, indices: np.ndarray, rows: int) -> np.ndarray:
    op = "GatherBlockQuantized"
    if indices.dtype.kind not in "iu":
        raise InputError("%s: indices must be integers, got %s" % (op, indices.dtype))
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -rows or idx.max() >= rows):
        raise InputError("%s: node %s: an index is out of range [-%d, %d)" % (op, ctx.node_name, rows, rows))
    return np.where(idx < 0, idx + rows, idx).reshape(-1)


def _four_bit(ctx, data, indices, scales, zero_points, gather_axis: int, quantize_axis: int, block_size: int):
    """The int4 / uint4 form: ``(data - zero_point) * scale`` per block of ``quantize_axis``, gathered along
    ``gather_axis`` (the rows are gathered first, then dequantized)."""
    op = "GatherBlockQuantized"
    if block_size < 16 or block_size & (block_size - 1):
        raise InputError("%s: block_size must be a power of 2 >= 16, got %d" % (op, block_size))
    rank = data.ndim
    g = norm_axis(op, gather_axis, rank, "gather_axis", InputError)
    q = norm_axis(op, quantize_axis, rank, "quantize_axis", InputError)
    if g == q:
        raise InputError("%s: gather_axis and quantize_axis are both axis %d" % (op, g))
    want = data.shape[:q] + (-(-data.shape[q] // block_size),) + data.shape[q + 1:]
    if scales.shape != want:
        raise InputError("%s: scales must have shape %s, got %s" % (op, list(want), list(scales.shape)))
    if zero_points is not None and (zero_points.dtype != data.dtype or zero_points.shape != want):
        raise InputError("%s: zero_points must be %s like data, of shape %s, got %s %s" % (
            op, dtypes.NAMES[dtypes.from_numpy(data.dtype)], list(want), zero_points.dtype, list(zero_points.shape)))
    idx = _flat_indices(ctx, indices, data.shape[g])

    def rows(t: np.ndarray) -> np.ndarray:  # gathered, then each block's value repeated over its block
        t = np.take(dtypes.four_bit_values(t), idx, axis=g)
        return np.take(np.repeat(t, block_size, axis=q), np.arange(data.shape[q]), axis=q)

    v = np.take(dtypes.four_bit_values(data), idx, axis=g).astype(np.int16)
    if zero_points is not None:
        v = v - rows(zero_points).astype(np.int16)
    out = (v.astype(np.float32) * rows(scales).astype(np.float32)).astype(scales.dtype)
    return (out.reshape(data.shape[:g] + indices.shape + data.shape[g + 1:]),)


@kernel("GatherBlockQuantized", domain=MS_DOMAIN)
def gather_block_quantized(ctx, data, indices, scales, zero_points=None, *, gather_axis=0, quantize_axis=1,
                           block_size=128, bits=4):
    op = "GatherBlockQuantized"
    bits, block_size = int(bits), int(block_size)
    if dtypes.is_four_bit(data.dtype):
        if bits != 4:
            raise InputError("%s: %s data takes bits=4, got %d" % (op, dtypes.NAMES[dtypes.from_numpy(data.dtype)],
                                                                   bits))
        return _four_bit(ctx, data, indices, scales, zero_points, int(gather_axis), int(quantize_axis), block_size)
    length = _check(op, data, scales, int(gather_axis), int(quantize_axis), block_size, bits)
    idx = _flat_indices(ctx, indices, data.shape[0])
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
