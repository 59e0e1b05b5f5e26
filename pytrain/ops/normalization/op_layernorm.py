"""LayerNormalization (opset 17): normalise over axes [axis, rank), optional Mean/InvStdDev outputs
shaped X.shape[:axis] + [1] * (rank - axis), statistics computed in the stash_type."""
from __future__ import annotations

from pytrain.base import dtypes
from pytrain.errors import InputError
from pytrain.ops.common import broadcasts_to, norm_axis
from pytrain.ops.normalization._standardize import standardize, work_dtype
from pytrain.ops.registry import kernel


@kernel("LayerNormalization")
def layer_normalization(ctx, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    a = norm_axis("LayerNormalization", axis, X.ndim)
    stash = dtypes.to_numpy(stash_type)
    tail = X.shape[a:]
    for name, v in (("Scale", Scale), ("B", B)):
        if v is not None and not broadcasts_to(v.shape, tail):
            raise InputError("LayerNormalization: %s of shape %s does not broadcast to the normalised "
                             "shape %s (axis=%d)" % (name, v.shape, tuple(tail), axis))
    # Statistics in at least the stash precision (float64 inputs stay float64 inside, as in
    # onnxruntime); Mean/InvStdDev are returned in the stash type the output's type says.
    y, mean, inv_std = standardize(X, range(a, X.ndim), epsilon, work_dtype(X.dtype, stash_type))
    y = y.astype(X.dtype, copy=False)
    y *= Scale
    if B is not None:
        y += B
    return (y, mean.astype(stash, copy=False) if ctx.wants(1) else None,
            inv_std.astype(stash, copy=False) if ctx.wants(2) else None)
