"""QuantizeLinear and DequantizeLinear, opsets 10 to 28: per tensor (a scalar scale), per axis (a 1-D
scale, opset 13 on) and blocked (``block_size``, opset 21 on), to and from 8- and 16-bit integers and int4 /
uint4 (opset 21 on; held one value a byte, pytrain.base.dtypes), as the ONNX spec and onnxruntime compute
them: ``y = saturate(round_half_even(x / scale) + zero_point)`` and ``y = (x - zero_point) * scale``. And the
training form of a Q -> DQ pair on an activation, ``ai.pytrain.FakeQuantize``, with its gradient."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.ops.quant.blocks import INTEGER_TYPES, broadcast_param, int_range, round_saturate
from pytrain.ops.registry import PYTRAIN_DOMAIN, kernel


def _float_of(scale: np.ndarray) -> np.dtype:
    # onnxruntime computes in float32 for float32 and float16 scales
    return np.dtype(np.float64) if scale.dtype == np.float64 else np.dtype(np.float32)


def _check_scale(op: str, scale: np.ndarray) -> None:
    if scale.dtype.kind != "f":
        raise InputError("%s: the scale must be a float tensor, got %s" % (op, scale.dtype))


def _output_type(op: str, zero_point: Optional[np.ndarray], output_dtype: int) -> np.dtype:
    if output_dtype:
        want = dtypes.to_numpy(int(output_dtype))
        if zero_point is not None and zero_point.dtype != want:
            raise InputError("%s: output_dtype %s differs from the zero point's type %s"
                             % (op, want, zero_point.dtype))
    else:
        want = zero_point.dtype if zero_point is not None else np.dtype(np.uint8)
    if want not in INTEGER_TYPES:
        raise InputError("%s: pytrain quantizes to %s, not %s"
                         % (op, ", ".join(str(t) for t in INTEGER_TYPES), want))
    return want


@kernel("QuantizeLinear", since=10)
def quantize_linear(ctx, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                    precision=0):
    op = "QuantizeLinear"
    _check_scale(op, y_scale)
    if precision and dtypes.to_numpy(int(precision)) != _float_of(y_scale):
        raise InputError("%s: precision %s: pytrain divides in %s only" % (op, precision, _float_of(y_scale)))
    out = _output_type(op, y_zero_point, output_dtype)
    ft = _float_of(y_scale)
    s = broadcast_param(op, "y_scale", y_scale.astype(ft), x.shape, axis, int(block_size), ctx.opset)
    v = np.asarray(x, dtype=ft) / s
    if y_zero_point is not None:
        zp = broadcast_param(op, "y_zero_point", dtypes.four_bit_values(y_zero_point), x.shape, axis,
                             int(block_size), ctx.opset)
        v = np.rint(v) + zp.astype(ft)
    return (round_saturate(v, out),)


@kernel("DequantizeLinear", since=10)
def dequantize_linear(ctx, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    op = "DequantizeLinear"
    _check_scale(op, x_scale)
    if x.dtype.kind not in "iu" and not dtypes.is_four_bit(x.dtype):
        raise InputError("%s: x must be an integer tensor, got %s" % (op, x.dtype))
    if x_zero_point is not None and x_zero_point.dtype != x.dtype:
        raise InputError("%s: x_zero_point is %s, x is %s: they must be of one type"
                         % (op, x_zero_point.dtype, x.dtype))
    x = dtypes.four_bit_values(x)
    if x_zero_point is not None:
        x_zero_point = dtypes.four_bit_values(x_zero_point)
    out = dtypes.to_numpy(int(output_dtype)) if output_dtype else x_scale.dtype
    ft = _float_of(x_scale)
    s = broadcast_param(op, "x_scale", x_scale.astype(ft), x.shape, axis, int(block_size), ctx.opset)
    d = x.astype(np.int64)
    if x_zero_point is not None:
        d = d - broadcast_param(op, "x_zero_point", x_zero_point, x.shape, axis, int(block_size),
                                ctx.opset).astype(np.int64)
    return (np.asarray(d.astype(ft) * s, dtype=out),)


# ---- the training form of a QuantizeLinear -> DequantizeLinear pair on an activation (fake quantization) -----
@kernel("FakeQuantize", domain=PYTRAIN_DOMAIN)
def fake_quantize(ctx, x, scale, zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """``DequantizeLinear(QuantizeLinear(x))`` with one scale and zero point, as the two kernels compute it
    (the training model's form of the pair, pytrain.autodiff.quant_forms)."""
    (q,) = quantize_linear(ctx, x, scale, zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)
    return dequantize_linear(ctx, q, scale, zero_point, axis=axis, block_size=block_size)


@kernel("FakeQuantizeGrad", domain=PYTRAIN_DOMAIN)
def fake_quantize_grad(ctx, dy, x, scale, zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """PyTorch's fake-quantize gradient (``fake_quantize_per_tensor_affine`` / ``_per_channel_affine``'s
    backward): the straight-through estimator masked to the representable range, ``dy * (q_min <=
    round(x / scale) + zero_point <= q_max)``, the rounding and division QuantizeLinear's."""
    op = "FakeQuantizeGrad"
    out = _output_type(op, zero_point, output_dtype)
    ft = _float_of(scale)
    s = broadcast_param(op, "scale", scale.astype(ft), x.shape, axis, int(block_size), ctx.opset)
    v = np.rint(np.asarray(x, dtype=ft) / s)
    if zero_point is not None:
        v = v + broadcast_param(op, "zero_point", dtypes.four_bit_values(zero_point), x.shape, axis,
                                int(block_size), ctx.opset).astype(ft)
    lo, hi = int_range(out)
    return (np.where((v >= lo) & (v <= hi), dy, np.zeros((), dy.dtype)).astype(dy.dtype, copy=False),)
