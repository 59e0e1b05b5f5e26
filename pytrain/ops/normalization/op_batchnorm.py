"""BatchNormalization: inference form, and the opset-14/15 training_mode=1 form that also
outputs the updated running statistics."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError, UnsupportedOpError
from pytrain.ops.registry import kernel


@kernel("BatchNormalization")
def batch_normalization(ctx, X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                        training_mode=0, spatial=1):
    if not spatial:  # opset 7-8: statistics per (C, D1, ...) element, which no exporter writes today
        raise UnsupportedOpError("BatchNormalization: attribute spatial=0 (per-element statistics, opset 7-8) "
                                 "is not supported; re-export the model with opset 9 or later")
    if X.ndim < 2:
        raise InputError("BatchNormalization: X must be (N, C, ...), got shape %s" % (X.shape,))
    c = X.shape[1]
    for name, v in (("scale", scale), ("B", B), ("input_mean", input_mean), ("input_var", input_var)):
        if v.shape != (c,):
            raise InputError("BatchNormalization: input %s must have shape (%d,) (channels of X %s), "
                             "got %s" % (name, c, X.shape, v.shape))
    t = X.dtype.type
    bshape = (1, c) + (1,) * (X.ndim - 2)
    if training_mode:
        axes = (0,) + tuple(range(2, X.ndim))
        mean = np.mean(X, axis=axes, dtype=X.dtype)
        var = np.mean(np.square(X - mean.reshape(bshape)), axis=axes, dtype=X.dtype)
    else:
        mean, var = input_mean, input_var
    # y = x * a + b with per-channel a, b: two passes over X instead of four.
    a = (scale / np.sqrt(var + t(epsilon))).astype(X.dtype, copy=False)
    b = (B - mean * a).astype(X.dtype, copy=False)
    y = X * a.reshape(bshape)
    y += b.reshape(bshape)
    if not training_mode:
        return (y,)
    mom = t(momentum)
    running_mean = (input_mean * mom + mean * (t(1) - mom)).astype(input_mean.dtype, copy=False)
    running_var = (input_var * mom + var * (t(1) - mom)).astype(input_var.dtype, copy=False)
    return (y, running_mean, running_var)
