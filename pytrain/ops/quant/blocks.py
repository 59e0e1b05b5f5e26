"""Quantization arithmetic shared by the kernels and QLoRA's export: integer ranges, round-and-saturate,
the broadcast form of a per-tensor / per-axis / blocked scale, and the packed n-bit layout of
onnxruntime's MatMulNBits / GatherBlockQuantized (values packed low bits first within a byte)."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.ops.common import norm_axis

#: the com.microsoft domain of onnxruntime's contrib ops
MS_DOMAIN = "com.microsoft"

#: the integer types the linear quantization ops produce and read (int4/uint4 held one value a byte,
#: pytrain.base.dtypes.INT4_NP; float8 has no numpy dtype: a model using it is refused where its tensors are
#: read, naming the type)
INTEGER_TYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.uint16), np.dtype(np.int16),
                 dtypes.INT4_NP, dtypes.UINT4_NP)


def int_range(dtype: np.dtype) -> Tuple[int, int]:
    """(lowest, highest) value of an integer dtype (int4 / uint4 included)."""
    if dtypes.is_four_bit(dtype):
        return dtypes.four_bit_range(dtype)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def round_saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``v`` rounded half to even and clipped to ``dtype``'s range, as ``dtype`` (QuantizeLinear's rule)."""
    lo, hi = int_range(dtype)
    q = np.clip(np.rint(v), lo, hi)
    return dtypes.as_four_bit(q, dtype) if dtypes.is_four_bit(dtype) else q.astype(dtype)


def broadcast_param(op: str, name: str, p: np.ndarray, shape: Tuple[int, ...], axis: int,
                    block_size: int, opset: int) -> np.ndarray:
    """A scale or zero point in a form that broadcasts against a tensor of ``shape``: a scalar (per tensor),
    a 1-D tensor along ``axis`` (per axis, opset 13 on), or a tensor of the input's rank with
    ``ceil(shape[axis] / block_size)`` blocks along ``axis`` (blocked, opset 21 on)."""
    rank = len(shape)
    if block_size < 0:
        raise InputError("%s: block_size must be >= 0, got %d" % (op, block_size))
    if block_size == 0 and (p.ndim == 0 or p.size == 1 and p.ndim == 1):
        return p.reshape(())
    if opset < 13:
        raise InputError("%s: opset %d takes a scalar %s only (per-axis from opset 13), got shape %s"
                         % (op, opset, name, list(p.shape)))
    a = norm_axis(op, axis, rank, err=InputError)
    if block_size == 0:
        if p.ndim != 1 or p.shape[0] != shape[a]:
            raise InputError("%s: per-axis %s must be 1-D of length %d (axis %d of input %s), got shape %s"
                             % (op, name, shape[a], axis, list(shape), list(p.shape)))
        return p.reshape((1,) * a + (shape[a],) + (1,) * (rank - a - 1))
    if opset < 21:
        raise InputError("%s: blocked quantization (block_size) needs opset 21, the model has %d" % (op, opset))
    blocks = -(-shape[a] // block_size)
    want = shape[:a] + (blocks,) + shape[a + 1:]
    if tuple(p.shape) != want:
        raise InputError("%s: blocked %s must have shape %s (input %s, axis %d, block_size %d), got %s"
                         % (op, name, list(want), list(shape), axis, block_size, list(p.shape)))
    return np.take(np.repeat(p, block_size, axis=a), np.arange(shape[a]), axis=a)


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The ``count`` values along the last axis of a uint8 array packing ``8 // bits`` values per byte,
    lowest bits first (MatMulNBits' and GatherBlockQuantized's layout), as uint8."""
    if bits == 8:
        return packed[..., :count]
    per = 8 // bits
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    vals = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return vals.reshape(packed.shape[:-1] + (packed.shape[-1] * per,))[..., :count]


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of :func:`unpack_bits`: values in ``[0, 2**bits)`` along the last axis packed into uint8
    (zero-padded to a whole byte)."""
    v = np.asarray(values, dtype=np.uint8)
    if bits == 8:
        return v
    per = 8 // bits
    pad = (-v.shape[-1]) % per
    if pad:
        v = np.concatenate([v, np.zeros(v.shape[:-1] + (pad,), np.uint8)], axis=-1)
    v = v.reshape(v.shape[:-1] + (v.shape[-1] // per, per))
    out = np.zeros(v.shape[:-1], np.uint8)
    for i in range(per):
        out |= (v[..., i] << np.uint8(i * bits)).astype(np.uint8)
    return out


class NBitsLayout:
    """The shapes of a MatMulNBits weight: ``N`` output columns, ``K`` inputs, ``bits`` per value,
    ``block_size`` values of K per scale."""

    __slots__ = ("K", "N", "bits", "block_size", "blocks", "blob")

    def __init__(self, K: int, N: int, bits: int, block_size: int) -> None:
        if bits not in (2, 4, 8):
            raise InputError("MatMulNBits: bits=%d; pytrain reads 2-, 4- and 8-bit weights" % bits)
        if block_size < 16 or block_size & (block_size - 1):
            raise InputError("MatMulNBits: block_size must be a power of 2 >= 16, got %d" % block_size)
        self.K, self.N, self.bits, self.block_size = int(K), int(N), int(bits), int(block_size)
        self.blocks = -(-self.K // self.block_size)
        self.blob = self.block_size * self.bits // 8


def nbits_dequantize(B: np.ndarray, scales: np.ndarray, zero_points: Optional[np.ndarray],
                     lay: NBitsLayout) -> np.ndarray:
    """The (N, K) float weight a MatMulNBits node means: ``(q - zero_point) * scale`` per block, the
    zero point ``2**(bits-1)`` when absent (onnxruntime's contrib op schema)."""
    n, kb = lay.N, lay.blocks
    if tuple(B.shape) != (n, kb, lay.blob) or B.dtype != np.uint8:
        raise InputError("MatMulNBits: B must be uint8 of shape %s (N, blocks, block_size*bits/8), got %s %s"
                         % ([n, kb, lay.blob], B.dtype, list(B.shape)))
    if scales.size != n * kb:
        raise InputError("MatMulNBits: scales must hold N*blocks = %d values, got shape %s"
                         % (n * kb, list(scales.shape)))
    q = unpack_bits(B.reshape(n, kb * lay.blob), lay.bits, kb * lay.block_size).reshape(n, kb, lay.block_size)
    s = scales.reshape(n, kb, 1)
    if zero_points is None:
        w = (q.astype(np.int16) - (1 << (lay.bits - 1))).astype(s.dtype) * s
    elif zero_points.dtype == np.uint8:
        per_row = -(-kb * lay.bits // 8)
        if zero_points.size != n * per_row:
            raise InputError("MatMulNBits: packed uint8 zero_points must hold N*ceil(blocks*bits/8) = %d bytes, "
                             "got shape %s" % (n * per_row, list(zero_points.shape)))
        zp = unpack_bits(zero_points.reshape(n, per_row), lay.bits, kb).reshape(n, kb, 1)
        w = (q.astype(np.int16) - zp.astype(np.int16)).astype(s.dtype) * s
    else:
        if zero_points.size != n * kb or zero_points.dtype != scales.dtype:
            raise InputError("MatMulNBits: float zero_points must be %s like scales with N*blocks = %d values, "
                             "got %s %s" % (scales.dtype, n * kb, zero_points.dtype, list(zero_points.shape)))
        w = (q.astype(s.dtype) - zero_points.reshape(n, kb, 1)) * s
    return w.reshape(n, kb * lay.block_size)[:, :lay.K]


def nbits_quantize(W: np.ndarray, lay: NBitsLayout, symmetric: bool
                   ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """(B, scales, zero_points) of an (N, K) float weight in MatMulNBits' layout, as onnxruntime's
    MatMul4BitsQuantizer makes them: symmetric blocks take ``scale = v / -2**(bits-1)`` of the value of
    largest magnitude and no zero points; asymmetric ones span [min(0, lo), max(0, hi)] with packed
    uint8 zero points."""
    n, kb, bs = lay.N, lay.blocks, lay.block_size
    w = np.zeros((n, kb * bs), np.float32)
    w[:, :lay.K] = W
    w = w.reshape(n, kb, bs)
    top = (1 << lay.bits) - 1
    mid = 1 << (lay.bits - 1)
    if symmetric:
        idx = np.argmax(np.abs(w), axis=2)[..., None]
        peak = np.take_along_axis(w, idx, axis=2)
        scale = (peak / np.float32(-mid)).astype(np.float32)
        inv = np.where(scale != 0, np.float32(1) / np.where(scale != 0, scale, 1), 0).astype(np.float32)
        q = np.clip(np.rint(w * inv) + mid, 0, top)
        zp = None
    else:
        lo = np.minimum(w.min(axis=2, keepdims=True), 0)
        hi = np.maximum(w.max(axis=2, keepdims=True), 0)
        scale = ((hi - lo) / np.float32(top)).astype(np.float32)
        inv = np.where(scale != 0, np.float32(1) / np.where(scale != 0, scale, 1), 0).astype(np.float32)
        zpf = np.clip(np.rint(-lo * inv), 0, top)
        q = np.clip(np.rint(w * inv) + zpf, 0, top)
        zp = pack_bits(zpf.reshape(n, kb).astype(np.uint8), lay.bits).reshape(-1)
    B = pack_bits(q.astype(np.uint8).reshape(n, kb * bs), lay.bits).reshape(n, kb, lay.blob)
    return B, scale.reshape(n, kb), zp
