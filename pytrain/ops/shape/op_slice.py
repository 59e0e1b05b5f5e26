"""Slice: starts/ends/axes/steps inputs (Slice-1, before opset 10: starts/ends/axes attributes, which the
kernel receives under the inputs' names), negative and out-of-range values clamped per the spec."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import int_list, norm_axes
from pytrain.ops.elementwise.op_clip import refuse_legacy
from pytrain.ops.registry import kernel


def slice_index(op: str, shape: Sequence[int], starts: List[int], ends: List[int],
                axes: Optional[List[int]] = None, steps: Optional[List[int]] = None) -> Tuple[slice, ...]:
    """The numpy index (one slice per axis) ONNX Slice takes from a tensor of ``shape``."""
    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise InputError("%s: starts %s, ends %s, axes %s and steps %s must have the same length"
                         % (op, starts, ends, axes, steps))
    index = [slice(None)] * rank
    for a, st, en, sp in zip(norm_axes(op, axes, rank, err=InputError), starts, ends, steps):
        dim = int(shape[a])
        if sp == 0:
            raise InputError("%s: step for axis %d is 0" % (op, a))
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            st = min(max(st, 0), dim)
            en = min(max(en, 0), dim)
            index[a] = slice(st, en, sp)
        else:
            st = min(max(st, 0), dim - 1)
            en = min(max(en, -1), dim - 1)
            # a Python end of -1 would mean "the last element", not "before the first"
            index[a] = slice(st, en if en >= 0 else None, sp)
    return tuple(index)


@kernel("Slice")
def slice_(ctx, data, starts=None, ends=None, axes=None, steps=None, **legacy):
    refuse_legacy("Slice", ctx, legacy, ignored=())
    if starts is None or ends is None:
        raise GraphError("Slice %r needs starts and ends (inputs from opset 10 on, attributes before)" % ctx.node_name)
    if ctx.opset >= 10 and isinstance(starts, list):  # an attribute (a list), not an input (an array)
        raise GraphError("Slice %r: attribute starts is Slice-1's (before opset 10)" % ctx.node_name)
    idx = slice_index("Slice", data.shape, int_list("Slice", "starts", starts),
                      int_list("Slice", "ends", ends), int_list("Slice", "axes", axes),
                      int_list("Slice", "steps", steps))
    return (np.asarray(data[idx]),)
