"""Convolutions and pooling on the wasm kernels: im2col/col2im columns (im2col.c), depthwise and
pointwise Conv and their gradients (conv.c; narrow depthwise rows with the images as SIMD lanes,
depthwise.c), FusedConv's clip (elementwise.c), MaxPool and its gradient (pool.c).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from pytrain.ops.wasm import F32, plain, ptr, kernels
from pytrain.ops.wasm.elementwise import scalar_bound
from pytrain.ops.wasm.linalg import MIN_MACS


def columns(xt: np.ndarray, win) -> Optional[np.ndarray]:
    """conv_columns' matrix (C*K, L*N) for a 2-D convolution of the padded float32 input ``xt`` in
    the batch-last layout (C, H, W, N) (web/kernels/im2col.c); None for other cases, which numpy
    handles."""
    if win.rank != 2 or xt.dtype != np.float32 or not xt.flags.c_contiguous:
        return None
    c, h, w, n = xt.shape
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    cols = np.empty((c * kh * kw, oh * ow * n), dtype=np.float32)
    if cols.size:
        kernels.im2col(ptr(xt), ptr(cols), n, c, h, w, kh, kw, oh, ow, win.strides[0], win.strides[1],
                     win.dilations[0], win.dilations[1])
    return cols


def columns_adjoint(cols: np.ndarray, win) -> Optional[np.ndarray]:
    """conv_columns_adjoint's padded batch-last (C, H, W, N) sum for a 2-D convolution
    (web/kernels/im2col.c); ``cols`` is C-contiguous (C*K, L*N)."""
    if win.rank != 2 or cols.dtype != np.float32:
        return None
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    c = cols.shape[0] // (kh * kw)
    n = cols.shape[1] // (oh * ow)
    h, w = win.padded_shape
    xt = np.zeros((c, h, w, n), dtype=np.float32)
    if cols.size:
        kernels.col2im(ptr(cols), ptr(xt), n, c, h, w, kh, kw, oh, ow, win.strides[0], win.strides[1],
                     win.dilations[0], win.dilations[1])
    return xt


def max_pool(xp: np.ndarray, win, want_indices: bool,
             storage_order: int) -> Optional[Tuple[np.ndarray, Optional[np.ndarray]]]:
    """MaxPool's (Y, Indices) for a 2-D window over the padded float32 input ``xp``
    (web/kernels/pool.c); None for other cases, which numpy handles."""
    if win.rank != 2 or xp.dtype != np.float32 or not xp.flags.c_contiguous:
        return None
    n, c, hp, wp = xp.shape
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    y = np.empty((n, c, oh, ow), dtype=np.float32)
    idx = np.empty((n, c, oh, ow), dtype=np.int64) if want_indices else None
    if y.size:
        kernels.maxpool2d(ptr(xp), ptr(y), ptr(idx) if want_indices else 0, n * c, hp, wp, kh, kw, oh, ow,
                        win.strides[0], win.strides[1], win.dilations[0], win.dilations[1],
                        win.in_shape[0], win.in_shape[1], win.pads_begin[0], win.pads_begin[1],
                        int(storage_order))
    return y, idx


def max_pool_grad(ctx, dY: np.ndarray, Indices: np.ndarray, X: np.ndarray, *,
                  storage_order: int = 0) -> Optional[Tuple[np.ndarray]]:
    """MaxPoolGrad (pool.c), for registry.accelerate: row-major Indices only, and any index out
    of range hands the node back to the numpy kernel, which reports it."""
    if (storage_order != 0 or not plain(dY) or X.dtype != np.float32 or Indices.dtype != np.int64
            or not Indices.flags.c_contiguous or Indices.shape != dY.shape):
        return None
    dx = np.zeros(X.shape, dtype=np.float32)
    if kernels.maxpool_grad(ptr(dY), ptr(Indices), ptr(dx), dY.size, dx.size):
        return None
    return (dx,)


#: Depthwise Convs and their gradients over output rows narrower than this take the images as SIMD lanes over
#: padded planes (depthwise.c depthwise_lanes, depthwise_grad_lanes): in Node on MobileNetV3's 5x5 layers (N = 8;
#: 2x6 and 3x12 outputs) the gradients 2-3x faster than the row walk, which wins back on wide strided rows
#: (3x3 / 2 onto 6x24 and 12x48).
DEPTHWISE_LANES_BELOW = 16


def depthwise_lanes_scratch(n: int, win, planes: int = 2) -> int:
    """Floats of scratch depthwise.c's lanes paths need: ``planes`` padded input planes (the gradient's
    2: X and dX; the forward's 1) and one output plane, each position holding N rounded up to 4 lanes."""
    (oh, ow), (kh, kw) = win.out_shape, win.kernel
    (sh, sw), (dh, dw) = win.strides, win.dilations
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    return (planes * hp * wp + oh * ow) * ((n + 3) // 4 * 4)


#: The kernels' scratch up to this many floats (1 MiB) is one buffer kept between calls (grown as needed): in
#: Pyodide an np.empty and its address cost ~15 us a call (Chromium, load 6), for ~80 Conv/ConvGrad calls of a
#: MobileNetV3 step; larger scratch (DBNet's wide planes) is allocated per call and freed after it.
SCRATCH_KEPT_FLOATS = 1 << 18
_KEPT: Dict[str, Tuple[np.ndarray, int]] = {}


def _scratch(size: int) -> Tuple[Optional[np.ndarray], int]:
    """(an array the caller holds until its kernel has run, its address) of at least ``size`` float32
    values, uninitialised (no kernel reads scratch it has not written); (None, 0) for none."""
    if not size:
        return None, 0
    if size > SCRATCH_KEPT_FLOATS:
        work = np.empty(size, dtype=F32)
        return work, ptr(work)
    kept = _KEPT.get("buffer")
    if kept is None or kept[0].size < size:
        work = np.empty(max(size, 1 << 12), dtype=F32)
        kept = _KEPT["buffer"] = (work, ptr(work))
    return kept


def _key_part(v) -> Optional[tuple]:
    return None if v is None else tuple(v)


def _cached(plans: Dict[tuple, Any], key: tuple, make: Callable[[], Any]) -> Any:
    """``plans[key]``, made by ``make()`` the first time (a model of many shapes starts over rather than grow)."""
    plan = plans.get(key)
    if plan is None:
        if len(plans) >= 1024:
            plans.clear()
        plan = plans[key] = make()
    return plan


#: Conv's routing per (shapes, group, attributes), as ConvGrad's (_GRAD_PLANS): the kernel, its integer
#: arguments and its scratch floats, or False for the numpy kernel.
_PLANS: Dict[tuple, Any] = {}


def _conv_plan(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], attrs: tuple):
    """(kernel name, its integer arguments, scratch floats, the output's shape) for this Conv, or False."""
    from pytrain.ops.nn.op_conv import conv_window

    auto_pad, dilations, group, kernel_shape, pads, strides = attrs
    if X.ndim != 4 or W.ndim != 4 or X.size == 0 or W.size == 0:
        return False
    n, c, h, w = X.shape
    m, cg, kh, kw = W.shape
    group = int(group)
    depthwise = group == c and group > 1 and cg == 1 and m % c == 0
    if not (depthwise or group == 1):
        return False
    try:
        win = conv_window(X, W, B, group, kernel_shape, strides, dilations, pads, auto_pad)
    except Exception:
        return False  # the numpy kernel raises the proper error
    oh, ow = win.out_shape
    if oh <= 0 or ow <= 0:
        return False
    geo = (kh, kw, oh, ow, win.strides[0], win.strides[1], win.dilations[0], win.dilations[1], win.pads_begin[0],
           win.pads_begin[1])
    if depthwise:
        # narrow output rows: the images as SIMD lanes over padded planes (as the gradient's)
        lanes = n > 1 and ow < DEPTHWISE_LANES_BELOW
        return ("depthwise_conv2d", (n, c, m // c, h, w) + geo, depthwise_lanes_scratch(n, win, 1) if lanes else 0,
                (n, m, oh, ow))
    pointwise = kh == 1 and kw == 1 and tuple(win.strides) == (1, 1) and not any(win.pads_begin) and (oh, ow) == (h, w)
    if pointwise and m * h * w * c >= MIN_MACS:
        s = h * w
        # few positions per image: the images side by side in one product, through scratch (conv.c)
        return "conv1x1", (n, c, m, s), (c + m) * n * s if s < CONV1X1_BATCHED_BELOW else 0, (n, m, oh, ow)
    if getattr(kernels, "conv2d", None) is None:
        return False  # (an older page: the numpy path, on the wasm im2col and GEMM)
    ck, l = c * kh * kw, oh * ow
    fold = n > 1 and l < CONV1X1_BATCHED_BELOW
    return "conv2d", (n, c, h, w, m) + geo + (int(fold),), ck * n * l + m * n * l if fold else ck * l, (n, m, oh, ow)


def conv(ctx, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None, *, auto_pad: str = "NOTSET",
         dilations=None, group: int = 1, kernel_shape=None, pads=None,
         strides=None) -> Optional[Tuple[np.ndarray]]:
    """2-D float32 Conv in one call (conv.c), for registry.accelerate: depthwise (group == C, one input
    channel per filter; narrow rows with the images as SIMD lanes), pointwise (1x1, stride 1, no padding,
    group 1) and, where the page has it, any other ungrouped one (conv2d: per image its im2col with the
    padding read as zeros, then one product, in NCHW throughout; few positions per image side by side).
    Anything else (other groups, other ranks), or anything malformed, goes to numpy."""
    if (X.dtype != F32 or W.dtype != F32 or not X.flags.c_contiguous or not W.flags.c_contiguous
            or (B is not None and (B.dtype != F32 or not B.flags.c_contiguous))):
        return None
    key = (X.shape, W.shape, None if B is None else B.shape, auto_pad, _key_part(dilations), group,
           _key_part(kernel_shape), _key_part(pads), _key_part(strides))
    plan = _cached(_PLANS, key, lambda: _conv_plan(X, W, B, (auto_pad, dilations, group, kernel_shape, pads, strides)))
    if plan is False:
        return None
    name, args, scratch, out_shape = plan
    y = np.empty(out_shape, dtype=F32)
    work, tmp = _scratch(scratch)  # (work: held until the kernel has run)
    bias = ptr(B) if B is not None else 0
    if name == "depthwise_conv2d":
        kernels.depthwise_conv2d(ptr(X), ptr(W), bias, ptr(y), *args, tmp)
    elif name == "conv1x1":
        kernels.conv1x1(ptr(X), ptr(W), bias, ptr(y), *args, tmp)
    else:
        kernels.conv2d(ptr(X), ptr(W), bias, ptr(y), *args, tmp)
    del work
    return (y,)


def conv_transpose(ctx, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None, *, auto_pad: str = "NOTSET",
                   dilations=None, group: int = 1, kernel_shape=None, output_padding=None, output_shape=None,
                   pads=None, strides=None) -> Optional[Tuple[np.ndarray]]:
    """2-D float32 ConvTranspose whose kernel equals its strides, ungrouped, unpadded (DBNet's 2x2 stride-2
    upsampling: every output from one tap) in one call (conv.c conv_transpose_tiles), for
    registry.accelerate; anything else, or anything malformed, goes to numpy."""
    from pytrain.ops.nn.op_conv_transpose import transpose_geometry

    if (X.ndim != 4 or W.ndim != 4 or X.dtype != F32 or W.dtype != F32 or not X.flags.c_contiguous
            or not W.flags.c_contiguous or X.size == 0 or W.size == 0 or int(group) != 1
            or (B is not None and (B.dtype != F32 or B.shape != (W.shape[1],) or not B.flags.c_contiguous))):
        return None
    try:
        geo = transpose_geometry("ConvTranspose", X.shape, W.shape, auto_pad, dilations, group, kernel_shape,
                                 output_padding, output_shape, pads, strides)
    except Exception:
        return None
    win = geo.win
    if (tuple(win.kernel) != tuple(win.strides) or any(d != 1 for d in win.dilations)
            or tuple(geo.out_shape) != tuple(geo.full_shape) or any(geo.pads_begin)):
        return None
    n, c, h, w = X.shape
    m, (kh, kw) = W.shape[1], win.kernel
    y = np.empty((n, m, h * kh, w * kw), dtype=np.float32)
    tmp = np.empty(m * kh * kw * h * w, dtype=np.float32)
    kernels.conv_transpose_tiles(ptr(X), ptr(W), ptr(B) if B is not None else 0, ptr(y), n, c, h, w, m, kh, kw,
                                 ptr(tmp))
    return (y,)


def global_average_pool(ctx, X: np.ndarray) -> Optional[Tuple[np.ndarray]]:
    """GlobalAveragePool of a float32 (N, C, d1, ...) tensor (pool.c row_means: each row's sum in an
    order that depends on the row alone, divided as the mean divides), for registry.accelerate; one call
    where numpy's einsum and division make two passes with a temporary (squeeze-excite pools 10 times a
    MobileNetV3 inference)."""
    if X.ndim < 3 or not plain(X, min_size=1):
        return None
    n, c = X.shape[0], X.shape[1]
    y = np.empty((n, c) + (1,) * (X.ndim - 2), dtype=np.float32)
    kernels.row_means(ptr(X), ptr(y), n * c, X.size // (n * c) if n * c else 0)
    return (y,)


def upsample(x: np.ndarray, factors) -> Optional[np.ndarray]:
    """Resize's nearest upsampling by whole factors of the last two axes of a float32 tensor (pool.c),
    for backend.use("upsample"); other cases go to numpy."""
    if (x.dtype != F32 or x.ndim < 2 or not x.flags.c_contiguous or any(k != 1 for k in factors[:-2])
            or x.size < 1):
        return None
    h, w = x.shape[-2:]
    fh, fw = int(factors[-2]), int(factors[-1])
    y = np.empty(x.shape[:-2] + (h * fh, w * fw), dtype=np.float32)
    kernels.upsample_nearest(ptr(x), ptr(y), x.size // (h * w), h, w, fh, fw)
    return y


#: Below this many positions per image a pointwise Conv puts the images side by side in one product
#: (in Node: 16 images of 6x6, 32 -> 192 channels 0.73 -> 0.17 ms; of 24x24, 48 -> 8: 0.16 vs 0.28 ms).
CONV1X1_BATCHED_BELOW = 128


def fused_conv(ctx, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], scale: np.ndarray, bias: np.ndarray,
               mean: np.ndarray, var: np.ndarray, clip_min: Optional[np.ndarray] = None,
               clip_max: Optional[np.ndarray] = None, **attrs):
    """pytrain.engine.fusion's FusedConv with its Clip, Relu, HardSigmoid or HardSwish (MobileNet's Conv +
    BatchNormalization + ReLU6 / HardSwish, squeeze-excite's Conv + HardSigmoid): the numpy kernel folds
    the normalisation and runs the convolution (through the accelerated Conv), told not to activate;
    the activation then runs in place in one wasm pass (elementwise.c) instead of numpy's several
    passes with their temporaries. For registry.accelerate."""
    from pytrain.ops.registry import PYTRAIN_DOMAIN, get_kernel

    activation = attrs.get("activation", "")
    if isinstance(activation, bytes):
        activation = activation.decode()
    act = "clip" if attrs.get("clip") else activation
    if act not in ("clip", "Relu", "HardSigmoid", "HardSwish") or X.dtype != F32 or W.dtype != F32:
        return None  # nothing to add: the numpy kernel already runs the accelerated Conv
    if act == "clip":
        lo = scalar_bound(clip_min, np.float32, -math.inf)
        hi = scalar_bound(clip_max, np.float32, math.inf)
        if lo is None or hi is None:
            return None  # the numpy kernel names the bad bound
    attrs["clip"] = 0
    attrs["activation"] = ""
    y, = get_kernel("FusedConv", PYTRAIN_DOMAIN).numpy_fn(ctx, X, W, B, scale, bias, mean, var, clip_min,
                                                          clip_max, **attrs)
    if y.dtype != F32 or y.size == 0:
        attrs["activation"] = activation  # (float64 batch statistics: numpy's activation, as it would)
        return get_kernel("FusedConv", PYTRAIN_DOMAIN).numpy_fn(ctx, X, W, B, scale, bias, mean, var, clip_min,
                                                                clip_max, **attrs)
    y = np.ascontiguousarray(y)
    if act == "clip":
        kernels.clip(ptr(y), ptr(y), y.size, lo, hi)
    elif act == "Relu":
        kernels.relu(ptr(y), ptr(y), y.size)
    elif act == "HardSigmoid":
        kernels.hard_activation(ptr(y), y.size, 1, float(np.float32(attrs.get("alpha", 0.2))),
                                float(np.float32(attrs.get("beta", 0.5))))
    else:
        kernels.hard_activation(ptr(y), y.size, 2, float(np.float32(1.0 / 6.0)), 0.5)
    return (y,)


#: ConvGrad's routing per (shapes, group, attributes): the kernel's integer arguments made ready, or False for
#: the numpy kernel. MobileNetV3 makes 53 ConvGrad calls a step over a few dozen geometries; in Pyodide the
#: window's checks and lookups cost as much as a small layer's kernel (squeeze-excite's 1x1 over 1x1 planes).
_GRAD_PLANS: Dict[tuple, Any] = {}


def _grad_plan(dY: np.ndarray, X: np.ndarray, W: np.ndarray, attrs: tuple):
    """(depthwise, lanes, the kernel's integer arguments, scratch floats) for this ConvGrad, or False."""
    from pytrain.ops.nn.op_conv import conv_window

    auto_pad, dilations, group, kernel_shape, pads, strides = attrs
    if X.ndim != 4 or W.ndim != 4 or dY.ndim != 4 or X.size == 0 or W.size == 0:
        return False
    n, c, h, w = X.shape
    m, cg, kh, kw = W.shape
    g = int(group)
    depthwise = g == c and g > 1 and cg == 1 and m % c == 0
    if not (depthwise or (g == 1 and cg == c)) or (kernel_shape and tuple(kernel_shape) != (kh, kw)):
        return False
    try:
        win = conv_window(X, W, None, g, kernel_shape, strides, dilations, pads, auto_pad)
    except Exception:
        return False  # the numpy kernel raises the proper error
    oh, ow = win.out_shape
    if oh <= 0 or ow <= 0 or dY.shape != (n, m, oh, ow):
        return False
    geo = (kh, kw, oh, ow, win.strides[0], win.strides[1], win.dilations[0], win.dilations[1], win.pads_begin[0],
           win.pads_begin[1])
    if depthwise:
        lanes = n > 1 and ow < DEPTHWISE_LANES_BELOW
        return True, lanes, (n, c, m // c, h, w) + geo, depthwise_lanes_scratch(n, win) if lanes else 0
    ck, l = c * kh * kw, oh * ow
    fold = n > 1 and l < CONV1X1_BATCHED_BELOW
    return False, False, (n, c, h, w, m) + geo + (int(fold),), ck * n * l + m * n * l if fold else ck * l


def conv_grad(ctx, dY: np.ndarray, X: np.ndarray, W: np.ndarray, *, auto_pad: str = "NOTSET", dilations=None,
              group: int = 1, kernel_shape=None, pads=None, strides=None) -> Optional[Tuple]:
    """ConvGrad's (dX, dW, dB) of a float32 2-D Conv in one call (conv.c), for registry.accelerate: ungrouped
    (conv2d_grad: per image the columns read with the padding as zeros, dW += dY @ cols^T, dX = col2im(W^T @
    dY), NCHW throughout; few positions per image side by side) or depthwise (depthwise_conv2d_grad, direct;
    narrow rows with the images as SIMD lanes), where the numpy kernel moves the batch last and pads, and takes a
    depthwise conv as C one-row products.
    Other groups and ranks, or anything malformed, go to numpy (which names what is wrong)."""
    if X.dtype != F32 or W.dtype != F32 or dY.dtype != F32 or getattr(kernels, "conv2d_grad", None) is None:
        return None
    key = (dY.shape, X.shape, W.shape, auto_pad, _key_part(dilations), group, _key_part(kernel_shape),
           _key_part(pads), _key_part(strides))
    plan = _cached(_GRAD_PLANS, key,
                   lambda: _grad_plan(dY, X, W, (auto_pad, dilations, group, kernel_shape, pads, strides)))
    if plan is False:
        return None
    depthwise, lanes, args, scratch = plan
    X, W, dY = np.ascontiguousarray(X), np.ascontiguousarray(W), np.ascontiguousarray(dY)
    want_dx, want_dw, want_db = (tuple(ctx.output_mask) + (False, False, False))[:3]
    # (the lanes path writes dX whole; the other paths add into zeros)
    dx = (np.empty if lanes else np.zeros)(X.shape, dtype=F32) if want_dx else None
    dw = np.empty(W.shape, dtype=F32) if want_dw else None
    if want_dx or want_dw:
        pdx, pdw = ptr(dx) if want_dx else 0, ptr(dw) if want_dw else 0
        work, tmp = _scratch(scratch)  # (work: held until the kernel has run)
        if depthwise:
            kernels.depthwise_conv2d_grad(ptr(X), ptr(W), ptr(dY), pdx, pdw, *args, tmp)
        else:
            kernels.conv2d_grad(ptr(X), ptr(W), ptr(dY), pdx, pdw, *args, tmp)
        del work
    db = None
    if want_db:
        n, m = dY.shape[0], dY.shape[1]
        if dY.shape[2] * dY.shape[3] == 1:  # (squeeze-excite's planes of one: one reduction, not two)
            db = dY.reshape(n, m).sum(axis=0)
        else:
            # the images' planes added first, then each channel's positions: numpy's reduction over axes (0, 2)
            # at once walks the array by strides (in CPython 18 vs 82 us for MobileNetV3's (8, 288, 2, 6))
            db = dY.reshape(n, m, -1).sum(axis=0).sum(axis=1)
    return (dx, dw, db)
