"""Reshape: shape input with 0 (copy the input dim, unless allowzero) and one -1 (inferred)."""
from __future__ import annotations

from pytrain.errors import InputError
from pytrain.ops.common import int_list
from pytrain.ops.registry import kernel


def target_shape(op: str, in_shape, shape, allowzero: int = 0) -> tuple:
    """ONNX Reshape's output shape for ``shape`` (a list of ints) applied to ``in_shape``."""
    out = list(shape)
    if allowzero and 0 in out and -1 in out:
        raise InputError("%s: shape %s has both 0 and -1 with allowzero=1" % (op, out))
    if out.count(-1) > 1:
        raise InputError("%s: shape %s has more than one -1" % (op, out))
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise InputError("%s: shape %s copies dimension %d (0) but the input %s has rank %d"
                                 % (op, list(shape), i, tuple(in_shape), len(in_shape)))
            out[i] = int(in_shape[i])
        elif d < -1:
            raise InputError("%s: shape %s has a negative dimension %d" % (op, list(shape), d))
    total = 1
    for d in in_shape:
        total *= int(d)
    known = 1
    for d in out:
        if d != -1:
            known *= d
    if -1 in out:
        if known == 0 or total % known:
            raise InputError("%s: cannot infer -1 in shape %s for an input of shape %s"
                             % (op, list(shape), tuple(in_shape)))
        out[out.index(-1)] = total // known
    elif known != total:
        raise InputError("%s: cannot reshape an input of shape %s (%d elements) to %s"
                         % (op, tuple(in_shape), total, out))
    return tuple(out)


@kernel("Reshape")
def reshape(ctx, data, shape, *, allowzero=0):
    return (data.reshape(target_shape("Reshape", data.shape, int_list("Reshape", "shape", shape), allowzero)),)
