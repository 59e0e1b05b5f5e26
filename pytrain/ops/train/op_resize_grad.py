"""ResizeGrad: the gradient of Resize / Upsample with respect to X.

Resize is linear in X: along each resized axis ``y[o] = sum_t w[o, t] * x[idx[o, t]]``. Its
gradient scatters dY back through the same maps: ``dx[idx[o, t]] += w[o, t] * dy[o]``, axis by
axis in reverse order (nearest: each dY lands on the one input it copied; outputs that
tf_crop_and_resize filled with the extrapolation value send nothing back).
"""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError
from pytrain.ops.nn.op_resize import kept_plan, resample_adjoint
from pytrain.ops.registry import PYTRAIN_DOMAIN, OpContext, kernel


@kernel("ResizeGrad", domain=PYTRAIN_DOMAIN)
def resize_grad(ctx: OpContext, dY: np.ndarray, X: np.ndarray, roi=None, scales=None, sizes=None, *,
                antialias=0, axes=None, coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75,
                exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
                mode="nearest", nearest_mode="round_prefer_floor") -> tuple:
    """dX of Resize(X, roi, scales, sizes) given dY; attributes as Resize-19's (``nearest_mode`` may
    also be "simple", Resize-10's and Upsample's rounding)."""
    op = "ResizeGrad node %r" % ctx.node_name
    plan = kept_plan(op, X.shape, roi, scales, sizes, antialias, axes, coordinate_transformation_mode,
                     cubic_coeff_a, exclude_outside, keep_aspect_ratio_policy, mode, nearest_mode)
    if dY.shape != plan.out_shape:
        raise InputError("%s: dY has shape %s, expected Resize's output shape %s" % (op, dY.shape, plan.out_shape))
    return (resample_adjoint(dY, plan).astype(X.dtype, copy=False),)
