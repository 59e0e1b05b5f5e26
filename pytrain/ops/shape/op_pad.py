"""Pad (opset >= 11: pads and constant_value inputs, opset-18 axes input; before 11 the ``pads`` (Pad-1:
``paddings``) and ``value`` attributes, which the kernel receives under the inputs' names; constant,
reflect, edge and wrap modes; negative pads crop)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import int_list, norm_axes, scalar_of
from pytrain.ops.elementwise.op_clip import refuse_legacy
from pytrain.ops.registry import kernel

_MODES = ("constant", "reflect", "edge", "wrap")


@kernel("Pad")
def pad(ctx, data, pads=None, constant_value=None, axes=None, *, mode="constant", **legacy):
    refuse_legacy("Pad", ctx, legacy, ignored=("paddings", "value"))
    if ctx.opset < 11:  # Pad-1/2: the pads and the constant are attributes
        pads = legacy.get("paddings") if pads is None else pads
        if legacy.get("value") is not None:
            constant_value = np.asarray(legacy["value"], dtype=data.dtype)
    elif legacy or isinstance(pads, list):  # an attribute (a list), not an input (an array)
        raise GraphError("Pad %r: attribute %s is Pad-1/2's (before opset 11)"
                         % (ctx.node_name, sorted(legacy)[0] if legacy else "pads"))
    if pads is None:
        raise GraphError("Pad %r needs pads (an input from opset 11 on, an attribute before)" % ctx.node_name)
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in _MODES:
        raise GraphError("Pad: mode %r is not one of %s" % (mode, ", ".join(_MODES)))
    p = int_list("Pad", "pads", pads)
    r = data.ndim
    ax = list(range(r)) if axes is None else list(norm_axes("Pad", int_list("Pad", "axes", axes), r,
                                                              err=InputError))
    if len(p) != 2 * len(ax):
        raise InputError("Pad: pads has %d values, expected %d (begin and end for each of %d axes)"
                         % (len(p), 2 * len(ax), len(ax)))
    begin = [0] * r
    end = [0] * r
    for i, a in enumerate(ax):
        begin[a], end[a] = p[i], p[i + len(ax)]
    # negative pads crop first; what remains is a plain non-negative pad
    crop = tuple(slice(max(-b, 0), data.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begin, end)))
    x = data[crop] if any(b < 0 or e < 0 for b, e in zip(begin, end)) else data
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if not any(b or e for b, e in width):
        return (x if x is data else np.array(x),)
    if mode == "constant":
        v = scalar_of("Pad", "constant_value", constant_value, 0)
        out = np.empty(tuple(d + b + e for d, (b, e) in zip(x.shape, width)), dtype=data.dtype)
        out.fill(v)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, width))] = x
        return (out,)
    for i, (b, e) in enumerate(width):
        if (b or e) and x.shape[i] == 0:
            raise InputError("Pad: cannot %s-pad axis %d of size 0" % (mode, i))
    return (np.pad(x, width, mode=mode),)
