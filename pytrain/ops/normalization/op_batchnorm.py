"""BatchNormalization: inference form, and the opset-14/15 training_mode=1 form that also
outputs the updated running statistics."""
from __future__ import annotations

from typing import Tuple

import numpy as np

from pytrain.errors import InputError, UnsupportedOpError
from pytrain.ops.registry import kernel


def check_parameters(x_shape: Tuple[int, ...], scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray,
                     input_var: np.ndarray) -> None:
    """X (of shape ``x_shape``) must be (N, C, ...) and every parameter (C,)."""
    if len(x_shape) < 2:
        raise InputError("BatchNormalization: X must be (N, C, ...), got shape %s" % (x_shape,))
    c = x_shape[1]
    for name, v in (("scale", scale), ("B", B), ("input_mean", input_mean), ("input_var", input_var)):
        if v.shape != (c,):
            raise InputError("BatchNormalization: input %s must have shape (%d,) (channels of X %s), "
                             "got %s" % (name, c, x_shape, v.shape))


def scale_shift(dtype: np.dtype, scale: np.ndarray, B: np.ndarray, mean: np.ndarray, var: np.ndarray,
                epsilon: float) -> Tuple[np.ndarray, np.ndarray]:
    """Per-channel ``a, b`` (in ``dtype``) with ``BatchNormalization(x) = x * a + b``:
    ``a = scale / sqrt(var + epsilon)``, ``b = B - mean * a``. Also what folds an inference-mode
    BatchNormalization into the Conv before it (pytrain.fusion)."""
    t = np.dtype(dtype).type
    a = (scale / np.sqrt(var + t(epsilon))).astype(dtype, copy=False)
    b = (B - mean * a).astype(dtype, copy=False)
    return a, b


@kernel("BatchNormalization")
def batch_normalization(ctx, X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                        training_mode=0, spatial=1):
    if not spatial:  # opset 7-8: statistics per (C, D1, ...) element, which no exporter writes today
        raise UnsupportedOpError("BatchNormalization: attribute spatial=0 (per-element statistics, opset 7-8) "
                                 "is not supported; re-export the model with opset 9 or later")
    check_parameters(X.shape, scale, B, input_mean, input_var)
    c = X.shape[1]
    t = X.dtype.type
    bshape = (1, c) + (1,) * (X.ndim - 2)
    if training_mode:
        axes = (0,) + tuple(range(2, X.ndim))
        mean = np.mean(X, axis=axes, dtype=X.dtype)
        var = np.mean(np.square(X - mean.reshape(bshape)), axis=axes, dtype=X.dtype)
    else:
        mean, var = input_mean, input_var
    # y = x * a + b with per-channel a, b: two passes over X instead of four.
    a, b = scale_shift(X.dtype, scale, B, mean, var, epsilon)
    y = X * a.reshape(bshape)
    y += b.reshape(bshape)
    if not training_mode:
        return (y,)
    mom = t(momentum)
    running_mean = (input_mean * mom + mean * (t(1) - mom)).astype(input_mean.dtype, copy=False)
    running_var = (input_var * mom + var * (t(1) - mom)).astype(input_var.dtype, copy=False)
    return (y, running_mean, running_var)
