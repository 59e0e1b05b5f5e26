"""Clip: min/max as optional inputs (opset >= 11) or, in Clip-6, as attributes (floats, defaulting to the
float range: the kernel receives them under the same names); when min > max everything becomes max."""
from __future__ import annotations

from typing import Optional

import numpy as np

from pytrain.errors import InputError, UnsupportedOpError
from pytrain.ops.registry import kernel


def _clip_is_min_of_max() -> bool:
    """Whether this numpy's ``np.clip`` gives ``minimum(maximum(x, lo), hi)`` for non-NaN bounds,
    NaN inputs staying NaN and min > max giving max (a zero's sign may differ: maximum(-0.0, 0.0)
    is 0.0 in numpy 2, clip keeps -0.0, as onnx.reference's np.clip does). numpy 2's clip is one
    vectorised loop, 2-4x faster than maximum then minimum; in numpy 1.17 all three branch per
    element, at about the same cost."""
    probe = np.array([-0.0, np.nan, -np.inf, np.inf, -1.0, 0.5, 2.0], dtype=np.float32)
    for lo, hi in ((np.float32(0), np.float32(1)), (np.float32(1), np.float32(0))):
        want = np.minimum(np.maximum(probe, lo), hi) + np.float32(0)  # + 0: -0.0 becomes 0.0
        if (np.clip(probe, lo, hi) + np.float32(0)).tobytes() != want.tobytes():
            return False
    return True


_FAST_CLIP = _clip_is_min_of_max()


def clip_bound(name: str, v: Optional[np.ndarray], dtype: np.dtype):
    if v is None:
        return None
    v = np.asarray(v)
    if v.size != 1:
        raise InputError("Clip: input %s must be a scalar, got shape %s" % (name, v.shape))
    return v.reshape(()).astype(dtype)[()]


def clip_into(y: np.ndarray, x: np.ndarray, lo, hi) -> np.ndarray:
    """``y[...] = min(max(x, lo), hi)`` (a missing bound is None), ``y`` may be ``x``: the one
    formula both Clip and the fused Conv+BatchNormalization+Clip use. A NaN bound makes every
    element NaN, as maximum/minimum do."""
    if lo is not None and hi is not None and _FAST_CLIP and lo == lo and hi == hi:
        x.clip(lo, hi, out=y)  # (np.clip's own call, without its wrapper: 3.4 -> 1.6 us on a small array)
        return y
    if lo is not None:
        np.maximum(x, lo, out=y)
        x = y
    if hi is not None:
        np.minimum(x, hi, out=y)
    elif lo is None and y is not x:
        np.copyto(y, x)
    return y


@kernel("Clip")
def clip(ctx, input, min=None, max=None, **legacy):
    refuse_legacy("Clip", ctx, legacy)
    lo = clip_bound("min", min, input.dtype)
    hi = clip_bound("max", max, input.dtype)
    return (clip_into(np.empty_like(input), input, lo, hi),)


def refuse_legacy(op: str, ctx, attrs, ignored=("consumed_inputs",)) -> None:
    """A kernel taking an older version's attributes under its inputs' names (``**legacy`` holds the
    rest) refuses any other attribute, naming it: never run while ignoring one. ``consumed_inputs``
    (opset 1) was an in-place hint with no meaning."""
    unknown = sorted(a for a in attrs if a not in ignored)
    if unknown:
        raise UnsupportedOpError("%s %r has attribute%s %s, which pytrain's kernel does not support"
                                 % (op, ctx.node_name, "s" if len(unknown) > 1 else "", ", ".join(repr(a) for a in unknown)))
