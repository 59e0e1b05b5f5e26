"""Gradient rules of the ops in ``pytrain/ops/shape``: reshapes, transposes, slicing, gathering,
scattering, padding. See :mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

import numpy as np

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


@gradient("Gather", inputs=(0,))
def _gather(b: B, n: N, dy: G) -> G:
    return [b.pt("GatherGrad", dy[0], n.x(1), n.x(0), axis=int(n.attr("axis", 0)))]


# ---- shape and data movement -----------------------------------------------------------------
def _reshape_back(b: B, n: N, dy: G) -> G:
    return [b.op("Reshape", dy[0], b.op("Shape", n.x(0)))]


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    gradient(_op, inputs=(0,))(_reshape_back)


@gradient("Identity")
def _identity(b: B, n: N, dy: G) -> G:
    return [dy[0]]


@gradient("Transpose")
def _transpose(b: B, n: N, dy: G) -> G:
    perm = n.attr("perm")
    if perm is None:  # default reverses the axes, which is its own inverse
        return [b.op("Transpose", dy[0])]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [b.op("Transpose", dy[0], perm=inverse)]


@gradient("Expand", inputs=(0,))
def _expand(b: B, n: N, dy: G) -> G:
    return [b.unbroadcast(dy[0], n.x(0))]


@gradient("Concat")
def _concat(b: B, n: N, dy: G) -> G:
    return b.pt_outputs("ConcatGrad", [dy[0]] + [n.x(i) for i in range(n.n_inputs)],
                        [n.needs(i) for i in range(n.n_inputs)], axis=int(n.attr("axis")))


@gradient("Split", inputs=(0,))
def _split(b: B, n: N, dy: G) -> G:
    outs = [n.y(i) for i in range(len(n.node.output))]
    return [b.pt("SplitGrad", *(outs + list(dy)), axis=int(n.attr("axis", 0)))]


@gradient("Slice", inputs=(0,))
def _slice(b: B, n: N, dy: G) -> G:
    if n.x(1) is None:  # Slice-1: starts, ends, axes attributes
        ints = [b.const(n.attr(k), np.int64) if n.attr(k) is not None else None for k in ("starts", "ends", "axes")]
        return [b.pt("SliceGrad", dy[0], n.x(0), *ints)]
    return [b.pt("SliceGrad", dy[0], n.x(0), n.x(1), n.x(2), n.x(3), n.x(4))]


# ---- shape, indexing and scattering (GatherElements, Scatter*, Trilu, Pad, Tile, ...) ------------
@gradient("GatherElements", inputs=(0,))
def _gather_elements(b: B, n: N, dy: G) -> G:
    return [b.pt("GatherElementsGrad", dy[0], n.x(1), n.x(0), axis=int(n.attr("axis", 0))), None]


def _scatter(b: B, n: N, dy: G, **attrs: object) -> G:
    # none/add need only dY and the indices; mul/max/min also the values met at each position
    red = n.attr("reduction", "none")
    values = [n.x(0), n.x(2), n.y()] if red in ("mul", "max", "min") else []
    d = b.pt_outputs(n.node.op_type + "Grad", [dy[0], n.x(1)] + values, [n.needs(0), n.needs(2)],
                     reduction=red, **attrs)
    return [d[0], None, d[1]]


@gradient("ScatterElements", inputs=(0, 2))
def _scatter_elements(b: B, n: N, dy: G) -> G:
    return _scatter(b, n, dy, axis=int(n.attr("axis", 0)))


@gradient("ScatterND", inputs=(0, 2))
def _scatter_nd(b: B, n: N, dy: G) -> G:
    return _scatter(b, n, dy)


@gradient("Trilu", inputs=(0,))
def _trilu(b: B, n: N, dy: G) -> G:
    # Trilu keeps or zeroes each element: its gradient applies the same mask to dy
    return [b.op("Trilu", dy[0], n.x(1), upper=int(n.attr("upper", 1))), None]


@gradient("Pad", inputs=(0, 2))
def _pad(b: B, n: N, dy: G) -> G:
    mode = n.attr("mode", "constant")
    x, pads, value, axes = n.x(0), n.x(1), n.x(2), n.x(3)
    if pads is None:  # Pad-1/2: the pads an attribute (the constant one too, which does not train)
        pads = b.const(n.attr("pads", n.attr("paddings")), np.int64)
    dx = dv = None
    if n.needs(0):
        # constant mode: dX is dY with the padding cut off and the cropped parts zero-filled,
        # which is Pad with the pads negated; other modes fold the copies back (PadGrad)
        dx = (b.op("Pad", dy[0], b.op("Neg", pads), None, axes) if mode == "constant"
              else b.pt("PadGrad", dy[0], x, pads, axes, mode=mode))
    if value is not None and n.needs(2) and mode == "constant":
        # d constant_value = sum of dY over the padded positions (marked by padding zeros with 1)
        marks = b.op("Pad", b.zeros_like(x), pads, b.scalar(1.0, x), axes)
        dv = b.op("Reshape", b.op("ReduceSum", b.op("Mul", dy[0], marks), keepdims=0), b.op("Shape", value))
    return [dx, None, dv, None]


@gradient("Tile", inputs=(0,))
def _tile(b: B, n: N, dy: G) -> G:
    return [b.pt("TileGrad", dy[0], n.x(0), n.x(1)), None]


@gradient("GatherND", inputs=(0,))
def _gather_nd(b: B, n: N, dy: G) -> G:
    return [b.pt("GatherNDGrad", dy[0], n.x(1), n.x(0), batch_dims=int(n.attr("batch_dims", 0)))]
