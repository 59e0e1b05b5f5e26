"""If: run the branch the condition takes (a one-element boolean tensor)."""
from __future__ import annotations

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.registry import kernel


def condition(op: str, cond, node: str) -> bool:
    c = np.asarray(cond)
    if c.size != 1:
        raise InputError("%s %r: the condition must hold one element, got shape %s" % (op, node, list(c.shape)))
    return bool(c.reshape(()))


@kernel("If")
def if_(ctx, cond, *outer, then_branch=None, else_branch=None):
    if then_branch is None or else_branch is None:
        raise GraphError("If %r needs both then_branch and else_branch" % ctx.node_name)
    branch = then_branch if condition("If", cond, ctx.node_name) else else_branch
    return tuple(branch.run((), outer[len(outer) - branch.n_outer:] if branch.n_outer else ()))
