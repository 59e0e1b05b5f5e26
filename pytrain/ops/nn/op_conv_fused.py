"""FusedConv: Conv, then an inference-mode BatchNormalization and/or Clip, Relu, HardSwish or
HardSigmoid, as one node.

Never in a model file: pytrain.fusion puts it in a plan in place of that chain when nothing else
reads the Conv's (or the BatchNormalization's) output, as in a frozen MobileNet backbone. The
normalisation is folded into the convolution, computed afresh on every call from whatever the
parameters are then (so a BatchNormalization whose parameters change between steps stays right; only
arrays that can never change, an InferenceSession's initializers, are folded once per node:
OpContext.constant_memo), and the activation runs in place on the convolution's fresh output:

    BN(conv(x, W) + B) = conv(x, W * a) + (B * a + b),  a = scale / sqrt(var + eps),  b = bias - mean * a

so the BatchNormalization's two passes over the activation vanish, and the activation's fresh
output array too. Results differ from the unfused chain by float32 rounding only
(onnxruntime folds the same way)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.elementwise.op_clip import clip_bound, clip_into
from pytrain.ops.normalization.op_batchnorm import check_parameters, scale_shift
from pytrain.ops.nn.op_conv import conv_plan, conv_window, convolve
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, get_kernel, kernel


def _activate(y: np.ndarray, activation: str, alpha: float, beta: float) -> np.ndarray:
    """``y`` through Relu, HardSwish or HardSigmoid, in place, with the same float operations as
    their kernels (pytrain/ops/elementwise), so the results are theirs bit for bit; but Relu is a clip to
    [0, inf] (clip_into: numpy 2's clip is one vectorised loop, 2.5x faster than its maximum on a
    MobileNetV3 layer), whose values are maximum's, a -0.0 staying -0.0 where maximum gives 0.0."""
    t = y.dtype.type
    if activation == "Relu":
        clip_into(y, y, t(0), t(np.inf))
    elif activation == "HardSigmoid":
        y *= t(alpha)
        y += t(beta)
        clip_into(y, y, t(0), t(1))
    elif activation == "HardSwish":
        g = y * t(1.0 / 6.0)
        g += t(0.5)
        clip_into(g, g, t(0), t(1))
        with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, as HardSwish's kernel gives
            y *= g
    elif activation:
        raise InputError("FusedConv: no in-place form of activation %r" % (activation,))
    return y


def _fold(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], bn: tuple, group: int, conv_args: tuple,
          epsilon: float) -> tuple:
    """The convolution's weights and bias with the inference BatchNormalization ``bn`` folded in, and
    an empty dict for :func:`conv_plan`'s plans of these weights."""
    m = W.shape[0]
    win = conv_window(X, W, B, group, *conv_args)
    check_parameters((X.shape[0], m) + win.out_shape, *bn)
    a, b = scale_shift(W.dtype, *bn, epsilon)
    w = W * a.reshape((m,) + (1,) * (W.ndim - 1))
    if B is not None:
        b = B * a + b
    return w, b.astype(W.dtype, copy=False), {}


@kernel("FusedConv", domain=PYTRAIN_DOMAIN)
def fused_conv(ctx: OpContext, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None,
               scale: Optional[np.ndarray] = None, bias: Optional[np.ndarray] = None,
               mean: Optional[np.ndarray] = None, var: Optional[np.ndarray] = None,
               clip_min: Optional[np.ndarray] = None, clip_max: Optional[np.ndarray] = None, *,
               auto_pad: str = "NOTSET", dilations=None, group: int = 1, kernel_shape=None, pads=None,
               strides=None, epsilon: float = 1e-5, clip: int = 0, activation: str = "",
               alpha: float = 0.2, beta: float = 0.5) -> tuple:
    """Y = act(BatchNormalization(Conv(X, W, B), scale, bias, mean, var)) with Conv's attributes,
    BatchNormalization's epsilon (no normalisation when its four parameters are absent) and, when
    ``clip`` is 1, Clip's bounds (a missing one is None), else ``activation`` (Relu, HardSwish,
    HardSigmoid with ``alpha``/``beta``, or none)."""
    group = int(group)
    conv_args = (kernel_shape, strides, dilations, pads, auto_pad)
    bn = (scale, bias, mean, var)
    if scale is not None or bias is not None or mean is not None or var is not None:
        if scale is None or bias is None or mean is None or var is None:
            raise InputError("FusedConv: BatchNormalization needs scale, bias, mean and var, got %s"
                             % ([p is not None for p in bn],))
        # the Conv's output, the BatchNormalization's input, is (N, M, ...); an InferenceSession's
        # constant weights and statistics are folded once (ctx.constant_memo), a Module's on every call;
        # the folded weights' plans per input shape are kept beside them (conv_plan)
        W, B, kept = ctx.constant_memo((W, B) + bn, lambda: _fold(X, W, B, bn, group, conv_args, epsilon))
    else:
        kept = ctx.constant_memo((W, B), dict)
    win, form, operators = conv_plan(kept, X, W, B, group, *conv_args)
    if isinstance(activation, bytes):
        activation = activation.decode()
    lo = clip_bound("min", clip_min, X.dtype) if clip else None
    hi = clip_bound("max", clip_max, X.dtype) if clip else None
    info = get_kernel("Conv")
    if info.fn is not info.numpy_fn:  # an accelerated Conv (the browser's wasm kernels): through it
        y, = info.fn(ctx, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)
    else:  # (natively: no second pass over the checks)
        y = convolve(X, W, B, win, group, operators, form)
    if clip:
        return (clip_into(y, y, lo, hi),)
    return (_activate(y, activation, alpha, beta),)
