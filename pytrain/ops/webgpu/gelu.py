"""Layer 3, ops: Gelu and GeluGrad on the WebGPU device (the training model's fused GELU, pytrain.autodiff.gelu_forms)
as the dispatches of the exporters' chains they stand for (web/gpu's binary and unary_text shaders, in the numpy
kernels' formulas): a fused training model runs on the GPU as the chain did, whole, and the chain's scalars go up
once (read-only module constants, kept by Device.constant)."""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from pytrain.ops.elementwise.op_gelu import approximate_form
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext
from pytrain.ops.webgpu import GpuTensor
from pytrain.ops.webgpu.text import unary

_F32 = np.dtype(np.float32)
_CTX = OpContext()


def _scalar(v: float) -> np.ndarray:
    a = np.array(v, np.float32)
    a.flags.writeable = False
    return a


_ONE, _HALF, _NEG_HALF = _scalar(1.0), _scalar(0.5), _scalar(-0.5)
_CUBIC, _CUBIC3 = _scalar(0.044715), _scalar(3.0 * 0.044715)
_SQRT_2_OVER_PI, _HALF_SQRT_2_OVER_PI = _scalar(math.sqrt(2.0 / math.pi)), _scalar(0.5 * math.sqrt(2.0 / math.pi))
_INV_SQRT2, _INV_SQRT_2PI = _scalar(1.0 / math.sqrt(2.0)), _scalar(1.0 / math.sqrt(2.0 * math.pi))
_BASE: Dict[Tuple[str, str], Any] = {}


def _op(name: str, a: Any, b: Any) -> GpuTensor:
    return _BASE[("", name)](_CTX, a, b)[0]


def _code(code: int, x: GpuTensor) -> GpuTensor:
    """unary_text's ``code`` of x: 1 exp, 2 tanh, 3 erf, 4 x * x, 5 (x * x) * x (pytrain.ops.webgpu.text.unary)."""
    return unary(code)(_CTX, x)[0]


def _gpu(*xs: Any) -> bool:
    return all(isinstance(x, GpuTensor) and np.dtype(x.dtype) == _F32 for x in xs)


def gelu(ctx: OpContext, X: Any, *, approximate: object = "none") -> Optional[Tuple[GpuTensor]]:
    form = approximate_form(approximate)
    if form is None or not _gpu(X):
        return None
    if form == "tanh":   # tanh((x + 0.044715 x^3) sqrt(2/pi))
        inner = _op("Mul", _op("Add", X, _op("Mul", _code(5, X), _CUBIC)), _SQRT_2_OVER_PI)
        t = _code(2, inner)
    else:                # erf(x / sqrt 2)
        t = _code(3, _op("Mul", X, _INV_SQRT2))
    return (_op("Mul", X, _op("Mul", _op("Add", t, _ONE), _HALF)),)


def gelu_grad(ctx: OpContext, dY: Any, X: Any, *, approximate: object = "none") -> Optional[Tuple[GpuTensor]]:
    form = approximate_form(approximate)
    if form is None or not _gpu(dY, X) or tuple(dY.shape) != tuple(X.shape):
        return None
    x2 = _code(4, X)
    if form == "tanh":   # (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        t = _code(2, _op("Mul", _op("Mul", X, _SQRT_2_OVER_PI), _op("Add", _op("Mul", x2, _CUBIC), _ONE)))
        slope = _op("Mul", _op("Mul", _op("Mul", X, _HALF_SQRT_2_OVER_PI), _op("Sub", _ONE, _code(4, t))),
                    _op("Add", _op("Mul", x2, _CUBIC3), _ONE))
        d = _op("Add", _op("Mul", _op("Add", t, _ONE), _HALF), slope)
    else:                # Phi(x) + x phi(x)
        cdf = _op("Mul", _op("Add", _code(3, _op("Mul", X, _INV_SQRT2)), _ONE), _HALF)
        pdf = _op("Mul", _code(1, _op("Mul", x2, _NEG_HALF)), _INV_SQRT_2PI)
        d = _op("Add", cdf, _op("Mul", X, pdf))
    return (_op("Mul", dY, d),)


def table(base: Dict[Tuple[str, str], Any]) -> Dict[Tuple[str, str], Any]:
    """(domain, op) -> the GPU kernels of this module, for pytrain.ops.webgpu.kernels.KERNELS (``base``: that table,
    whose Add/Sub/Mul they dispatch through)."""
    _BASE.update(base)
    return {("", "Gelu"): gelu, (PYTRAIN_DOMAIN, "Gelu"): gelu, (PYTRAIN_DOMAIN, "GeluGrad"): gelu_grad}
