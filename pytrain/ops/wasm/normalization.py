"""BatchNormalization (inference, batchnorm.c) and LayerNormalization with its gradient
(layernorm.c) on the wasm kernels.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from pytrain.ops.wasm import F32, THREADS_MIN_ELEMENTS, plain, ptr, kernels, threaded


def batch_normalization(ctx, X: np.ndarray, scale: np.ndarray, B: np.ndarray, input_mean: np.ndarray,
                        input_var: np.ndarray, *, epsilon: float = 1e-5, momentum: float = 0.9,
                        training_mode: int = 0, spatial: int = 1) -> Optional[Tuple[np.ndarray]]:
    """Inference-mode BatchNormalization of float32 (N, C, ...) in one pass (batchnorm.c), for
    registry.accelerate; the per-channel a, b are computed exactly as the numpy kernel does."""
    if training_mode or not spatial or X.ndim < 2 or not plain(X):
        return None
    c = X.shape[1]
    for v in (scale, B, input_mean, input_var):
        if v.shape != (c,) or v.dtype != np.float32:
            return None
    t = np.float32
    a = np.ascontiguousarray(scale / np.sqrt(input_var + t(epsilon)), dtype=np.float32)
    b = np.ascontiguousarray(B - input_mean * a, dtype=np.float32)
    y = np.empty_like(X)
    kernels.channel_affine(ptr(X), ptr(y), ptr(a), ptr(b), X.shape[0], c, X.size // max(1, X.shape[0] * c))
    return (y,)


def _row_vector(v: Optional[np.ndarray], tail: Tuple[int, ...]) -> Optional[np.ndarray]:
    """LayerNormalization's Scale/B as one float32 per normalised element, or None when it is
    not exactly of the normalised shape (broadcast forms stay with numpy)."""
    if v is None or v.dtype != np.float32 or tuple(v.shape) != tuple(tail):
        return None
    return np.ascontiguousarray(v).reshape(-1)


def layer_normalization(ctx, X: np.ndarray, Scale: np.ndarray, B: Optional[np.ndarray] = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1):
    """LayerNormalization of float32 X over its last axes with float32 statistics, Scale (and B) of
    the normalised shape, in one call (layernorm.c), for registry.accelerate."""
    a = axis + X.ndim if axis < 0 else axis
    if stash_type != 1 or not 0 <= a < X.ndim or not plain(X, min_size=1) or X.size == 0:
        return None
    rows = int(np.prod(X.shape[:a]))
    n = X.size // rows
    scale = _row_vector(Scale, X.shape[a:])
    bias = _row_vector(B, X.shape[a:]) if B is not None else None
    if scale is None or (B is not None and bias is None):
        return None
    y = np.empty_like(X)
    stat_shape = X.shape[:a] + (1,) * (X.ndim - a)
    mean = np.empty(stat_shape, dtype=np.float32) if ctx.wants(1) else None
    inv_std = np.empty(stat_shape, dtype=np.float32) if ctx.wants(2) else None
    layernorm = threaded("layernorm", X.size, THREADS_MIN_ELEMENTS["layernorm"])
    layernorm(ptr(X), ptr(scale), ptr(bias) if bias is not None else 0, ptr(y),
              ptr(mean) if mean is not None else 0, ptr(inv_std) if inv_std is not None else 0,
              rows, n, float(np.float32(epsilon)))
    return (y, mean, inv_std)


def layer_normalization_grad(ctx, dY: np.ndarray, X: np.ndarray, Scale: np.ndarray, Mean: np.ndarray,
                             InvStdDev: np.ndarray, *, axis: int = -1, epsilon: float = 1e-5):
    """LayerNormalizationGrad for float32 tensors and float32 saved statistics (layernorm.c), for
    registry.accelerate."""
    a = axis + X.ndim if axis < 0 else axis
    if not 0 <= a < X.ndim or not plain(dY, X, min_size=1) or X.size == 0:
        return None
    rows = int(np.prod(X.shape[:a]))
    n = X.size // rows
    scale = _row_vector(Scale, X.shape[a:])
    if scale is None or dY.shape != X.shape:
        return None
    for s in (Mean, InvStdDev):
        if s.dtype != np.float32 or s.size != rows or not s.flags.c_contiguous:
            return None
    dx = np.empty_like(X) if ctx.wants(0) else None
    dscale = np.empty(Scale.shape, dtype=np.float32) if ctx.wants(1) else None
    dbias = np.empty(Scale.shape, dtype=np.float32) if ctx.wants(2) else None
    layernorm_grad = threaded("layernorm_grad", X.size, THREADS_MIN_ELEMENTS["layernorm_grad"])
    layernorm_grad(ptr(dY), ptr(X), ptr(scale), ptr(Mean), ptr(InvStdDev),
                   ptr(dx) if dx is not None else 0, ptr(dscale) if dscale is not None else 0,
                   ptr(dbias) if dbias is not None else 0, rows, n)
    return (dx, dscale, dbias)


#: Whether the page's batchnorm_training takes the running statistics (16 parameters, JS's Function.length): a
#: kernels.wasm from before them takes 11, ignores the rest and would leave the new running statistics unwritten.
RUNNING_IN_KERNEL = getattr(getattr(kernels, "batchnorm_training", None), "length", 0) == 16


def _channel_vectors(c: int, *vs: np.ndarray) -> bool:
    """Each of ``vs`` a C-contiguous float32 vector of ``c`` values."""
    for v in vs:  # (against the dtype F32, not the type np.float32, which numpy converts on every compare)
        if v.shape != (c,) or v.dtype != F32 or not v.flags.c_contiguous:
            return False
    return True


def batchnorm_training(ctx, X: np.ndarray, scale: np.ndarray, B: np.ndarray, running_mean: np.ndarray,
                       running_var: np.ndarray, *, epsilon: float = 1e-5,
                       momentum: float = 0.9) -> Optional[Tuple]:
    """BatchNormTraining of float32 (N, C, ...) (batchnorm.c batchnorm_training: the statistics and the
    output in three passes over each channel, where numpy makes about eight with their temporaries), for
    registry.accelerate; the running statistics as the numpy kernel's running_statistics() updates them, in the
    same call where they are float32 vectors (seven small numpy operations cost ~80 us in Pyodide, more than
    the kernel on most of MobileNetV3's layers). A batch of one value per channel goes to numpy, which refuses
    it by name."""
    if X.ndim < 2 or not plain(X) or not _channel_vectors(X.shape[1], scale, B):
        return None
    n, c = X.shape[0], X.shape[1]
    s = X.size // (n * c)
    if n * s < 2:
        return None
    y = np.empty_like(X)
    mean, invstd = np.empty(c, dtype=np.float32), np.empty(c, dtype=np.float32)
    if RUNNING_IN_KERNEL and _channel_vectors(c, running_mean, running_var):
        new_mean = np.empty(c, dtype=np.float32) if ctx.wants(1) else None
        new_var = np.empty(c, dtype=np.float32) if ctx.wants(2) else None
        kernels.batchnorm_training(ptr(X), ptr(y), ptr(scale), ptr(B), ptr(mean), 0, ptr(invstd), n, c, s,
                                   float(epsilon), ptr(running_mean), ptr(running_var),
                                   0 if new_mean is None else ptr(new_mean), 0 if new_var is None else ptr(new_var),
                                   float(momentum))
        return (y, new_mean, new_var, mean, invstd)
    var = np.empty(c, dtype=np.float32)
    kernels.batchnorm_training(ptr(X), ptr(y), ptr(scale), ptr(B), ptr(mean), ptr(var), ptr(invstd), n, c, s,
                               float(epsilon), 0, 0, 0, 0, 0.0)
    from pytrain.ops.train.op_batchnorm_training import running_statistics

    return (y,) + running_statistics(ctx, running_mean, running_var, mean, var, n * s, momentum) + (mean, invstd)


def batchnorm_grad(ctx, dY: np.ndarray, X: np.ndarray, scale: np.ndarray, saved_mean: np.ndarray,
                   saved_invstd: np.ndarray) -> Optional[Tuple]:
    """BatchNormGrad's (dX, dScale, dB) of float32 (N, C, ...) in two passes per channel (batchnorm.c
    batchnorm_grad), for registry.accelerate."""
    if X.ndim < 2 or not plain(dY, X) or not _channel_vectors(X.shape[1], scale, saved_mean, saved_invstd):
        return None
    n, c = X.shape[0], X.shape[1]
    dx = np.empty_like(X) if ctx.wants(0) else None
    dscale, db = np.empty(c, dtype=np.float32), np.empty(c, dtype=np.float32)
    kernels.batchnorm_grad(ptr(dY), ptr(X), ptr(scale), ptr(saved_mean), ptr(saved_invstd),
                           ptr(dx) if dx is not None else 0, ptr(dscale), ptr(db), n, c, X.size // (n * c))
    return (dx, dscale if ctx.wants(1) else None, db if ctx.wants(2) else None)
