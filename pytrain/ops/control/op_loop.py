"""Loop: run the body while the trip count and the condition allow (opset 11 on: no output shapes
are fixed ahead). Loop-carried values go round; each scan output is stacked along a new first axis."""
from __future__ import annotations

from typing import List

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.control.op_if import condition
from pytrain.ops.registry import kernel


def stack(op: str, node: str, parts: List[np.ndarray], k: int) -> np.ndarray:
    if not parts:
        # no iteration ran: the element shape is unknown; ONNX Runtime gives an empty float tensor too
        return np.zeros((0,), np.float32)
    shapes = {np.shape(p) for p in parts}
    if len(shapes) > 1:
        raise InputError("%s %r: scan output %d changes shape between iterations (%s)"
                         % (op, node, k, ", ".join(str(list(s)) for s in sorted(shapes))))
    return np.stack([np.asarray(p) for p in parts])


@kernel("Loop")
def loop(ctx, M=None, cond=None, *rest, body=None):
    if body is None:
        raise GraphError("Loop %r has no body" % ctx.node_name)
    n_carried = body.n_formal - 2
    if n_carried < 0 or len(rest) != n_carried + body.n_outer:
        raise GraphError("Loop %r: its body takes %d inputs (iteration, condition, then the loop-carried "
                         "values), but the node carries %d values" % (ctx.node_name, body.n_formal,
                                                                        len(rest) - body.n_outer))
    values = list(rest[:n_carried])
    outer = rest[n_carried:]
    trip = None if M is None else int(np.asarray(M).reshape(()))
    going = True if cond is None else condition("Loop", cond, ctx.node_name)
    scans: List[List[np.ndarray]] = []
    i = 0
    while going and (trip is None or i < trip):
        out = body.run([np.array(i, np.int64), np.array(going)] + values, outer)
        going = condition("Loop", out[0], ctx.node_name)
        values = list(out[1:1 + n_carried])
        extra = out[1 + n_carried:]
        if not scans:
            scans = [[] for _ in extra]
        for k, v in enumerate(extra):
            scans[k].append(v)
        i += 1
    n_scan = len(body.graph.output) - 1 - n_carried
    scans = scans or [[] for _ in range(n_scan)]
    return tuple(values) + tuple(stack("Loop", ctx.node_name, s, k) for k, s in enumerate(scans))
