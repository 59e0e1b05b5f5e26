"""Split: sizes as the ``split`` input (opset >= 13) or attribute (older), or ``num_outputs``
(opset >= 18, last chunk smaller), or an equal split into as many outputs as the node has."""
from __future__ import annotations

from pytrain.errors import GraphError, InputError
from pytrain.ops.common import int_list, norm_axis
from pytrain.ops.registry import kernel


@kernel("Split")
def split(ctx, input, split_in=None, *, axis=0, num_outputs=None, split=None):
    a = norm_axis("Split", axis, input.ndim)
    dim = input.shape[a]
    sizes = int_list("Split", "split", split_in) if split_in is not None else split
    n_out = len(ctx.output_mask)
    if sizes is not None and len(sizes) > 0:
        if num_outputs is not None:
            raise GraphError("Split: give either the split sizes or num_outputs, not both")
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise InputError("Split: sizes %s do not add up to dimension %d (axis %d of shape %s)"
                             % (list(sizes), dim, a, input.shape))
    elif num_outputs is not None:
        if num_outputs < 1:
            raise GraphError("Split: num_outputs must be >= 1, got %d" % num_outputs)
        chunk = -(-dim // num_outputs)
        sizes = [min(chunk, max(0, dim - i * chunk)) for i in range(num_outputs)]
    else:
        if dim % n_out:
            raise InputError("Split: dimension %d (axis %d of shape %s) does not split evenly into %d outputs"
                             % (dim, a, input.shape, n_out))
        sizes = [dim // n_out] * n_out
    outs = []
    start = 0
    index = [slice(None)] * input.ndim
    for s in sizes:
        index[a] = slice(start, start + s)
        outs.append(input[tuple(index)])
        start += s
    return tuple(outs)
