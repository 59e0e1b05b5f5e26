"""DynamicQuantizeLinear (opset 11): x to uint8 with a scale and zero point computed from x's own range
(widened to include 0), as onnxruntime and the spec compute them."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.quant.blocks import round_saturate
from pytrain.ops.registry import kernel


@kernel("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, x):
    if x.dtype != np.float32:
        raise InputError("DynamicQuantizeLinear: x must be float32, got %s" % x.dtype)
    f = np.float32
    hi = f(max(0.0, float(x.max()))) if x.size else f(0)
    lo = f(min(0.0, float(x.min()))) if x.size else f(0)
    # an all-zero x has no range: onnxruntime takes scale 1 (onnx.reference 1/255; y and zp are 0 either way)
    scale = f(1.0) if hi == lo else f(hi - lo) / f(255)
    zp = np.rint(np.clip(f(0) - lo / scale, 0, 255))
    y = round_saturate(np.rint(x / scale) + zp, np.dtype(np.uint8))
    return (y, np.asarray(scale, np.float32), np.asarray(zp, np.uint8))
