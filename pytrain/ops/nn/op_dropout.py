"""Dropout (opset 12+: ratio and training_mode inputs; before 12 ``ratio`` an attribute, which the
kernel receives under the input's name, and before 7 ``is_test``): random drop with ``ctx.rng`` when
training, identity otherwise; the second output is the bool keep-mask."""
from __future__ import annotations

import numpy as np

from pytrain.errors import InputError, UnsupportedOpError
from pytrain.ops.common import scalar_of
from pytrain.ops.elementwise.op_clip import refuse_legacy
from pytrain.ops.registry import kernel


@kernel("Dropout")
def dropout(ctx, data, ratio=None, training_mode=None, *, seed=None, **legacy):
    refuse_legacy("Dropout", ctx, legacy, ignored=("consumed_inputs", "is_test"))
    if ctx.opset < 7 and not legacy.get("is_test", 0):
        raise UnsupportedOpError("Dropout %r: before opset 7 a Dropout without is_test drops at random at "
                                 "inference too (onnxruntime reads it as the identity): pytrain does not guess "
                                 "which was meant; set is_test=1 or export at opset 7 or later" % ctx.node_name)
    # The seed attribute is ignored: the session's ctx.rng makes runs reproducible as a whole.
    r = float(scalar_of("Dropout", "ratio", ratio, 0.5))
    training = bool(scalar_of("Dropout", "training_mode", training_mode, False))
    if not 0.0 <= r <= 1.0:
        raise InputError("Dropout: ratio must be in [0, 1), got %r" % (r,))
    if not training or r == 0.0:
        mask = np.ones(data.shape, dtype=np.bool_) if ctx.wants(1) else None
        return (data, mask)
    if r == 1.0:
        return (np.zeros_like(data), np.zeros(data.shape, dtype=np.bool_))
    mask = ctx.rng.random(data.shape, dtype=np.float32) >= np.float32(r)
    out = data * mask
    out *= data.dtype.type(1.0 / (1.0 - r))
    return (out, mask if ctx.wants(1) else None)
