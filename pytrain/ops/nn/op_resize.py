"""Resize (opsets 10-19) and Upsample (opsets 7-9), nearest / linear / cubic, as the ONNX spec says.

Resizing is separable: along each resized axis every output position ``o`` reads a few input
positions ``idx[o, t]`` with weights ``w[o, t]`` (one tap for nearest, two for linear, four for
cubic). :func:`resize_plan` computes those per-axis maps from the attributes (output size, the
coordinate transformation back to the input, the rounding or the interpolation kernel);
:func:`resample` applies them axis after axis, and :func:`resample_adjoint` scatters a gradient
back through the same maps (ResizeGrad, ``pytrain/ops/train/op_resize_grad.py``). Where every map
is a nearest integer upsampling (output ``o`` reads ``o // k``: DBNet's FPN, x2/x4 asymmetric floor)
both are a repeat / block sum per axis instead (natively 1.3-8x forward, 15-125x backward alone; in DBNet's step its ResizeGrad went 1.5 -> 1.0 ms).

The coordinate transformation maps an output index ``x`` to ``x_original`` in the input:
half_pixel ``(x + 0.5) / scale - 0.5``; pytorch_half_pixel the same but 0 for a length-1 output;
align_corners ``x * (in - 1) / (out - 1)``; asymmetric ``x / scale``; half_pixel_symmetric
half_pixel shifted so that the centres of input and output coincide; tf_half_pixel_for_nn
``(x + 0.5) / scale``; tf_crop_and_resize reads the region ``roi`` and writes
``extrapolation_value`` where ``x_original`` leaves the input. ``scale`` is the given scale, or
``out / in`` when ``sizes`` is given (then computed as ``x * in / out``, exact for integers).
Linear and cubic clamp their neighbours to the edge (cubic with ``exclude_outside`` drops the
outside ones and renormalises); nearest rounds as ``nearest_mode`` says, then clamps.

Resize-10 and Upsample have no coordinate attributes: they use asymmetric coordinates and, for
nearest, onnxruntime's rounding ("simple": floor when an axis grows, ceil when it shrinks).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError, UnsupportedOpError
from pytrain.ops import backend, linalg
from pytrain.ops.common import norm_axes
from pytrain.ops.registry import kernel

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


class AxisMap:
    """How one axis is resampled: output ``o`` is ``sum_t w[o, t] * x[idx[o, t]]`` (``w`` None:
    nearest, one tap); ``outside`` (or None) marks outputs that get ``extrapolation_value``."""

    __slots__ = ("axis", "in_len", "out_len", "idx", "w", "outside")

    def __init__(self, axis: int, in_len: int, out_len: int, idx: np.ndarray, w: Optional[np.ndarray],
                 outside: Optional[np.ndarray]) -> None:
        self.axis = axis
        self.in_len = in_len
        self.out_len = out_len
        self.idx = idx
        self.w = w
        self.outside = outside

    def matrix(self, dtype: np.dtype) -> np.ndarray:
        """The map as a dense ``(out, in)`` matrix (zero rows where ``outside``): resampling is
        ``x @ A^T`` along the axis, so its adjoint is ``dy @ A``."""
        a = np.zeros((self.out_len, self.in_len), dtype=np.float64)
        w = np.ones(self.idx.shape) if self.w is None else self.w
        rows = np.broadcast_to(np.arange(self.out_len)[:, None], self.idx.shape)
        np.add.at(a, (rows, self.idx), w)  # clamped taps may land on the same input twice
        if self.outside is not None:
            a[self.outside] = 0.0
        return a.astype(dtype, copy=False)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _choice(op: str, name: str, value, allowed: Sequence[str]) -> str:
    v = _text(value)
    if v not in allowed:
        raise UnsupportedOpError("%s: %s=%r is not supported (expected one of %s)"
                                 % (op, name, v, ", ".join(allowed)))
    return v


def _source_coords(coord: str, in_len: int, out_len: int, scale: float, by_size: bool,
                   roi: Optional[Tuple[float, float]]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """``x_original`` of every output index along one axis, and the tf_crop_and_resize outside mask."""
    x = np.arange(out_len, dtype=np.float64)

    def unscale(v: np.ndarray) -> np.ndarray:
        return v * in_len / out_len if by_size else v / scale

    if coord == "half_pixel":
        return unscale(x + 0.5) - 0.5, None
    if coord == "half_pixel_symmetric":
        out_float = float(out_len) if by_size else scale * in_len
        offset = in_len / 2.0 * (1.0 - out_len / out_float)
        return offset + unscale(x + 0.5) - 0.5, None
    if coord == "pytorch_half_pixel":
        return (unscale(x + 0.5) - 0.5 if out_len > 1 else np.zeros(out_len)), None
    if coord == "align_corners":
        return (x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)), None
    if coord == "asymmetric":
        return unscale(x), None
    if coord == "tf_half_pixel_for_nn":
        return unscale(x + 0.5), None
    # tf_crop_and_resize
    start, end = roi
    if out_len > 1:
        src = start * (in_len - 1) + x * (end - start) * (in_len - 1) / (out_len - 1)
    else:
        src = np.full(out_len, 0.5 * (start + end) * (in_len - 1))
    return src, (src < 0) | (src > in_len - 1)


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a`` at distances ``d``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _axis_map(axis: int, in_len: int, out_len: int, src: np.ndarray, outside: Optional[np.ndarray],
              mode: str, nearest_mode: str, scale: float, cubic_coeff_a: float,
              exclude_outside: int) -> AxisMap:
    if mode == "nearest":
        if nearest_mode == "simple":
            nearest_mode = "floor" if scale >= 1 else "ceil"
        if nearest_mode == "round_prefer_floor":
            i = np.ceil(src - 0.5)
        elif nearest_mode == "round_prefer_ceil":
            i = np.floor(src + 0.5)
        elif nearest_mode == "floor":
            i = np.floor(src)
        else:
            i = np.ceil(src)
        idx = np.clip(i, 0, in_len - 1).astype(np.int64)[:, None]
        return AxisMap(axis, in_len, out_len, idx, None, outside)
    base = np.floor(src)
    t = src - base
    if mode == "linear":
        offsets = np.array([0, 1])
        w = np.stack([1.0 - t, t], axis=1)
    else:
        offsets = np.array([-1, 0, 1, 2])
        w = _cubic_kernel(t[:, None] - offsets[None, :], cubic_coeff_a)
    raw = base.astype(np.int64)[:, None] + offsets[None, :]
    if mode == "cubic" and exclude_outside:
        w = np.where((raw < 0) | (raw >= in_len), 0.0, w)
        w = w / np.sum(w, axis=1, keepdims=True)
    return AxisMap(axis, in_len, out_len, np.clip(raw, 0, in_len - 1), w, outside)


class ResizePlan:
    """The output shape and the maps of the axes that change."""

    __slots__ = ("in_shape", "out_shape", "maps")

    def __init__(self, in_shape: Tuple[int, ...], out_shape: Tuple[int, ...], maps: List[AxisMap]) -> None:
        self.in_shape = in_shape
        self.out_shape = out_shape
        self.maps = maps


def _floats(v: Optional[np.ndarray]) -> Optional[List[float]]:
    if v is None:
        return None
    a = np.asarray(v)
    return None if a.size == 0 else [float(f) for f in a.reshape(-1)]


def resize_plan(op: str, x_shape: Sequence[int], roi: Optional[np.ndarray], scales: Optional[np.ndarray],
                sizes: Optional[np.ndarray], antialias: int = 0, axes: Optional[Sequence[int]] = None,
                coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
                exclude_outside: int = 0, keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
                nearest_mode: str = "round_prefer_floor") -> ResizePlan:
    """Resolve Resize's inputs and attributes (opset 19 names and defaults) for an input of shape
    ``x_shape``. ``nearest_mode`` may also be "simple" (Resize-10 and Upsample)."""
    mode = _choice(op, "mode", mode, MODES)
    coord = _choice(op, "coordinate_transformation_mode", coordinate_transformation_mode, COORDINATE_MODES)
    nearest_mode = _choice(op, "nearest_mode", nearest_mode, NEAREST_MODES + ("simple",))
    policy = _choice(op, "keep_aspect_ratio_policy", keep_aspect_ratio_policy, ASPECT_POLICIES)
    in_shape = tuple(int(d) for d in x_shape)
    rank = len(in_shape)
    ax = list(norm_axes(op, axes, rank)) if axes is not None and len(axes) else list(range(rank))

    scale_l, size_l = _floats(scales), _floats(sizes)
    if sizes is not None and np.asarray(sizes).size and np.asarray(sizes).dtype.kind not in "iu":
        raise InputError("%s: input sizes must be int64, got %s" % (op, np.asarray(sizes).dtype))
    if (scale_l is None) == (size_l is None):
        raise InputError("%s: exactly one of the inputs scales and sizes must be given (non-empty); got %s"
                         % (op, "both" if scale_l is not None else "neither"))
    given = scale_l if scale_l is not None else size_l
    if len(given) != len(ax):
        raise InputError("%s: %s has %d values, expected %d (one per %s)"
                         % (op, "scales" if scale_l is not None else "sizes", len(given), len(ax),
                            "axis in axes" if axes else "dimension of X %s" % (in_shape,)))
    roi_pairs: dict = {}
    if coord == "tf_crop_and_resize":
        r = _floats(roi)
        if r is None or len(r) != 2 * len(ax):
            raise InputError("%s: tf_crop_and_resize needs roi with %d values [starts..., ends...], got %s"
                             % (op, 2 * len(ax), None if r is None else len(r)))
        roi_pairs = {a: (r[i], r[len(ax) + i]) for i, a in enumerate(ax)}

    scale_of = {}
    out_of = {}
    if scale_l is not None:
        if any(not s > 0 for s in scale_l):
            raise InputError("%s: scales %s must be positive" % (op, scale_l))
        if policy != "stretch":
            raise GraphError("%s: keep_aspect_ratio_policy=%r applies only with sizes, not scales" % (op, policy))
        for a, s in zip(ax, scale_l):
            # floor(in * scale), also for tf_crop_and_resize (as onnxruntime and onnx.reference do)
            scale_of[a] = s
            out_of[a] = int(math.floor(in_shape[a] * s))
    else:
        if any(s < 1 for s in size_l):
            raise InputError("%s: sizes %s must be positive" % (op, [int(s) for s in size_l]))
        if policy == "stretch":
            for a, s in zip(ax, size_l):
                out_of[a] = int(s)
        else:
            ratios = [s / in_shape[a] for a, s in zip(ax, size_l)]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for a in ax:
                out_of[a] = int(math.floor(scale * in_shape[a] + 0.5))  # rounds half up, as the spec
                scale_of[a] = scale

    out_shape = tuple(out_of.get(a, in_shape[a]) for a in range(rank))
    if any(o < 1 for o in out_shape) or any(i < 1 for i in in_shape):
        raise InputError("%s: resizing %s gives the empty shape %s" % (op, in_shape, out_shape))
    if antialias and mode == "nearest":
        raise UnsupportedOpError("%s: antialias=1 is defined for modes linear and cubic only, not nearest" % op)
    if antialias and any(out_of[a] < in_shape[a] for a in ax):
        raise UnsupportedOpError("%s: antialias=1 when downsampling with mode %r is not supported"
                                 % (op, mode))
    maps = []
    for a in ax:
        i_len, o_len = in_shape[a], out_shape[a]
        by_size = a not in scale_of
        scale = o_len / i_len if by_size else scale_of[a]
        if o_len == i_len and scale == 1.0 and coord != "tf_crop_and_resize":
            continue  # every coordinate transformation is the identity here
        src, outside = _source_coords(coord, i_len, o_len, scale, by_size, roi_pairs.get(a))
        maps.append(_axis_map(a, i_len, o_len, src, outside, mode, nearest_mode, scale, float(cubic_coeff_a),
                              int(exclude_outside)))
    return ResizePlan(in_shape, out_shape, maps)


#: resize plans by value (shape, roi/scales/sizes, attributes): a model's Resize nodes see the same few
#: on every call, and building one costs more than DBNet's x2 upsampling copy itself (~100 us)
_PLANS: Dict[tuple, ResizePlan] = {}


def _value_key(v: Optional[np.ndarray]) -> Optional[tuple]:
    if v is None:
        return None
    a = np.asarray(v)
    return (a.dtype.str, a.shape, a.tobytes())


def kept_plan(op: str, x_shape: Sequence[int], roi: Optional[np.ndarray], scales: Optional[np.ndarray],
              sizes: Optional[np.ndarray], *attrs: Any) -> ResizePlan:
    """:func:`resize_plan` (same arguments, attributes positional), built once per distinct value of them
    (a plan is never changed: its maps' arrays are read-only; an error is raised each time, never kept)."""
    key = (tuple(int(d) for d in x_shape), _value_key(roi), _value_key(scales), _value_key(sizes)) + tuple(
        tuple(a) if isinstance(a, (list, np.ndarray)) else a for a in attrs)
    plan = _PLANS.get(key)
    if plan is None:
        plan = resize_plan(op, x_shape, roi, scales, sizes, *attrs)
        for m in plan.maps:
            for arr in (m.idx, m.w, m.outside):
                if arr is not None:
                    arr.flags.writeable = False
        if len(_PLANS) >= 256:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _along(axis: int, rank: int, v: np.ndarray) -> np.ndarray:
    """``v`` (1-D) shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return v.reshape((-1,) + (1,) * (rank - axis - 1))


def _repeat_factors(plan: ResizePlan, rank: int) -> Optional[List[int]]:
    """Per axis, ``k`` when every map is nearest with output ``o`` reading input ``o // k`` (an
    integer upsampling such as DBNet's x2/x4 with asymmetric floor or half-pixel rounding), else None."""
    ks = [1] * rank
    for m in plan.maps:
        if m.w is not None or m.outside is not None or not m.in_len or m.out_len % m.in_len:
            return None
        k = m.out_len // m.in_len
        if not np.array_equal(m.idx[:, 0], np.arange(m.out_len) // k):
            return None
        ks[m.axis] = k
    return ks


def _repeated(x: np.ndarray, axis: int, k: int) -> np.ndarray:
    """``x`` with each entry repeated ``k`` times along ``axis``, as a fresh array: a broadcast
    copy whose inner runs are the whole trailing extent (np.repeat for the last axis)."""
    if axis == x.ndim - 1:
        return np.repeat(x, k, axis=axis)
    shape = x.shape
    y = np.empty(shape[:axis] + (shape[axis] * k,) + shape[axis + 1:], dtype=x.dtype)
    y.reshape(shape[:axis + 1] + (k,) + shape[axis + 1:])[...] = x.reshape(shape[:axis + 1] + (1,) + shape[axis + 1:])
    return y


def _block_sums(g: np.ndarray, axis: int, k: int) -> np.ndarray:
    """The adjoint of :func:`_repeated`: each run of ``k`` entries along ``axis`` summed."""
    shape = g.shape
    v = g.reshape(shape[:axis] + (shape[axis] // k, k) + shape[axis + 1:])
    pick = (slice(None),) * (axis + 1)
    acc = v[pick + (0,)] + v[pick + (1,)]  # k >= 2; slices along a middle axis keep long runs
    for j in range(2, k):
        acc += v[pick + (j,)]
    return acc


def resample(x: np.ndarray, plan: ResizePlan, extrapolation_value: float = 0.0) -> np.ndarray:
    """Apply the plan's maps axis after axis; then the tf_crop_and_resize outside positions."""
    ks = _repeat_factors(plan, x.ndim)
    if ks is not None:  # each input repeated k times per axis: a copy per axis that grows
        upsample = backend.get("upsample")  # the browser's wasm kernel: one pass
        y = upsample(x, ks) if upsample is not None else None
        if y is not None:
            return y
        y = x
        for axis in reversed(range(x.ndim)):
            if ks[axis] > 1:
                y = _repeated(y, axis, ks[axis])
        return np.array(y, dtype=x.dtype) if y is x else y
    y = x
    for m in plan.maps:
        if m.w is None:
            y = np.take(y, m.idx[:, 0], axis=m.axis)
            continue
        w = m.w.astype(x.dtype, copy=False)
        acc = None
        for t in range(m.idx.shape[1]):
            term = _along(m.axis, x.ndim, w[:, t]) * np.take(y, m.idx[:, t], axis=m.axis)
            acc = term if acc is None else acc + term
        y = acc
    y = np.array(y, dtype=x.dtype)  # a fresh array even when nothing was resized
    for m in plan.maps:
        if m.outside is not None and m.outside.any():
            y[(slice(None),) * m.axis + (m.outside,)] = extrapolation_value
    return y


def resample_adjoint(dy: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """The transpose of :func:`resample` (without its constant extrapolated values): each axis's
    ``dy @ A`` in reverse order, ``A`` being the axis's map as a dense ``(out, in)`` matrix
    (for an integer nearest upsampling: the sum over each input's block of k outputs)."""
    ks = _repeat_factors(plan, dy.ndim)
    if ks is not None:
        g = dy
        for axis in range(dy.ndim):
            if ks[axis] > 1:
                g = _block_sums(g, axis, ks[axis])
        return np.array(g, dtype=dy.dtype)  # fresh and contiguous (a copy of dy when nothing grew)
    g = dy
    for m in reversed(plan.maps):
        a = m.matrix(dy.dtype)
        moved = np.moveaxis(g, m.axis, -1)
        lead = moved.shape[:-1]
        out = linalg.matmul(np.ascontiguousarray(moved).reshape(-1, m.out_len), a)
        g = np.moveaxis(np.asarray(out, dtype=dy.dtype).reshape(lead + (m.in_len,)), -1, m.axis)
    return np.ascontiguousarray(g, dtype=dy.dtype)


def check_interpolable(op: str, x: np.ndarray, mode: str) -> None:
    if _text(mode) != "nearest" and x.dtype.kind != "f":
        raise UnsupportedOpError("%s: mode %r on %s input is not supported (float inputs only; nearest takes "
                                 "any type)" % (op, _text(mode), x.dtype))


@kernel("Resize")
def resize(ctx, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    op = "Resize node %r" % ctx.node_name
    check_interpolable(op, X, mode)
    if ctx.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates
        plan = resize_plan(op, X.shape, None, roi, None, mode=mode, coordinate_transformation_mode="asymmetric",
                           nearest_mode="simple")
    else:
        _choice(op, "nearest_mode", nearest_mode, NEAREST_MODES)
        plan = kept_plan(op, X.shape, roi, scales, sizes, antialias, axes, coordinate_transformation_mode,
                         cubic_coeff_a, exclude_outside, keep_aspect_ratio_policy, mode, nearest_mode)
    return (resample(X, plan, extrapolation_value),)


@kernel("Upsample")
def upsample(ctx, X, *scales_input, mode="nearest", scales=None):
    # scales is an input since opset 9 and an attribute in opset 7 (hence the variadic input)
    op = "Upsample node %r" % ctx.node_name
    if _text(mode) not in ("nearest", "linear"):
        raise UnsupportedOpError("%s: mode=%r is not supported (expected nearest or linear)" % (op, _text(mode)))
    check_interpolable(op, X, mode)
    given = scales_input[0] if scales_input and scales_input[0] is not None else scales
    if given is None:
        raise GraphError("%s: scales (an input since opset 9, an attribute in opset 7) is missing" % op)
    plan = resize_plan(op, X.shape, None, np.asarray(given, dtype=np.float32), None, mode=mode,
                       coordinate_transformation_mode="asymmetric", nearest_mode="simple")
    return (resample(X, plan),)
