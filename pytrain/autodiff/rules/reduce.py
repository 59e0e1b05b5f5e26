"""Gradient rules of the ops in ``pytrain/ops/reduce``: reductions, CumSum, TopK, Einsum. See
:mod:`pytrain.autodiff.rules` for what a rule is."""
from __future__ import annotations

from pytrain.autodiff.builder import GradBuilder as B
from pytrain.autodiff.registry import ForwardNode as N
from pytrain.autodiff.registry import GradNames as G
from pytrain.autodiff.registry import gradient


# ---- reductions ---------------------------------------------------------------------------------
def _reduce_attrs(n: N) -> dict:
    return {"axes": n.attr("axes"), "keepdims": int(n.attr("keepdims", 1)),
            "noop_with_empty_axes": int(n.attr("noop_with_empty_axes", 0))}


@gradient("ReduceSum", inputs=(0,))
def _reduce_sum(b: B, n: N, dy: G) -> G:
    return [b.pt("ReduceGrad", dy[0], n.x(0), n.x(1), mode="sum", **_reduce_attrs(n))]


@gradient("ReduceMean", inputs=(0,))
def _reduce_mean(b: B, n: N, dy: G) -> G:
    return [b.pt("ReduceGrad", dy[0], n.x(0), n.x(1), mode="mean", **_reduce_attrs(n))]


def _reduce_extreme(b: B, n: N, dy: G) -> G:
    return [b.pt("ReduceMaxGrad", dy[0], n.x(0), n.y(), n.x(1), **_reduce_attrs(n))]


gradient("ReduceMax", inputs=(0,))(_reduce_extreme)
gradient("ReduceMin", inputs=(0,))(_reduce_extreme)


# ---- more reductions (ReduceL1/L2/LogSumExp/SumSquare/Prod, CumSum, TopK, Einsum, ...) ----------
def _reduce_norm(mode: str, with_y: bool):
    def rule(b: B, n: N, dy: G) -> G:
        return [b.pt("ReduceNormGrad", dy[0], n.x(0), n.y() if with_y else None, n.x(1), mode=mode,
                     **_reduce_attrs(n))]
    return rule


# dX = dY * sign(X) | X / Y | 2X | 1 / sum(X) | exp(X - Y), broadcast back over the reduced axes
for _op, _mode, _with_y in (("ReduceL1", "l1", False), ("ReduceL2", "l2", True),
                            ("ReduceSumSquare", "sum_square", False), ("ReduceLogSum", "log_sum", False),
                            ("ReduceLogSumExp", "log_sum_exp", True)):
    gradient(_op, inputs=(0,))(_reduce_norm(_mode, _with_y))


@gradient("ReduceProd", inputs=(0,))
def _reduce_prod(b: B, n: N, dy: G) -> G:
    # dX = dY * (product of the other elements), never Y / X (wrong where X holds zeros)
    return [b.pt("ReduceProdGrad", dy[0], n.x(0), n.x(1), **_reduce_attrs(n))]


@gradient("CumSum", inputs=(0,))
def _cum_sum(b: B, n: N, dy: G) -> G:
    # x[i] feeds every y[j] with j after i (or before, reversed): the adjoint is the cumulative sum
    # of dY in the other direction, with the same exclusive flag
    return [b.op("CumSum", dy[0], n.x(1), exclusive=int(n.attr("exclusive", 0)),
                 reverse=1 - int(n.attr("reverse", 0)))]


@gradient("TopK", inputs=(0,), outputs=(0,))
def _top_k(b: B, n: N, dy: G) -> G:
    return [b.pt("TopKGrad", dy[0], n.saved(1), n.x(0), axis=int(n.attr("axis", -1)))]


@gradient("Einsum")
def _einsum(b: B, n: N, dy: G) -> G:
    from pytrain.ops.reduce.op_einsum import parse
    eq = parse(n.attr("equation"), n.n_inputs)
    return [_einsum_operand_grad(b, n, eq, k, dy[0]) if n.needs(k) else None for k in range(n.n_inputs)]


def _einsum_operand_grad(b: B, n: N, eq, k: int, dy: str) -> str:
    """d/dX_k of sum(dY * einsum(...)) = einsum of dY with the other operands, onto X_k's term."""
    from pytrain.ops.reduce.op_einsum import ELLIPSIS, labels
    x = n.x(k)
    terms = [eq.output] + [t for j, t in enumerate(eq.inputs) if j != k]
    names = [dy] + [n.x(j) for j in range(n.n_inputs) if j != k]
    # A label repeated in X_k's term (a diagonal, a trace) gets a fresh label per repetition, and an
    # identity matrix operand ties the two: the gradient lands on the diagonal, 0 elsewhere.
    term = _einsum_distinct_labels(b, n, eq, k, terms, names)
    seen = set(c for t in terms for c in labels(t))
    if any(c not in seen for c in labels(term)) or (ELLIPSIS in term and not any(ELLIPSIS in t for t in terms)):
        # axes summed in X_k alone: dY is constant along them; ones shaped like X_k bring them back
        terms.append(term)
        names.append(b.op("Expand", b.scalar(1.0, x), b.op("Shape", x)))

    # The result's axes follow the operands' broadcast shapes: larger than X_k's where X_k has a
    # size-1 label or fewer '...' axes (summed back), size 1 where only the others had size 1
    # (expanded). Both are no-ops in the usual case; '...' goes first so numpy's rules apply.
    def fit(g: str, like: str) -> str:
        return b.unbroadcast(b.op("Expand", g, b.op("Shape", like)), like)

    if not any(ELLIPSIS in t for t in terms):
        return fit(b.op("Einsum", *names, equation=",".join(terms) + "->" + term), x)
    lead = ELLIPSIS + term.replace(ELLIPSIS, "")
    g = b.op("Einsum", *names, equation=",".join(terms) + "->" + lead)
    if ELLIPSIS not in term or term.startswith(ELLIPSIS):
        return fit(g, x)
    g = fit(g, b.op("Einsum", x, equation=term + "->" + lead))
    return b.op("Einsum", g, equation=lead + "->" + term)


def _einsum_distinct_labels(b: B, n: N, eq, k: int, terms: list, names: list) -> str:
    """X_k's term with every repeated label renamed to a fresh one; for each renaming, an identity
    matrix over (label, fresh label) is appended to ``terms``/``names``."""
    from pytrain.errors import UnsupportedOpError
    from pytrain.ops.reduce.op_einsum import ELLIPSIS, labels
    term, x = eq.inputs[k], n.x(k)
    named = labels(term)
    if len(set(named)) == len(named):
        return term
    used = set(c for t in eq.inputs + [eq.output] for c in labels(t))
    fresh = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
    head = len(labels(term.split(ELLIPSIS)[0])) if ELLIPSIS in term else len(named)
    shape = b.op("Shape", x)
    renamed = []
    for j, c in enumerate(named):
        if c not in renamed:
            renamed.append(c)
            continue
        if not fresh:
            raise UnsupportedOpError("Einsum node %r (equation %r): no letter left to differentiate the "
                                     "repeated label %r of input %d" % (n.node.name, str(eq), c, k))
        new = fresh.pop(0)
        renamed.append(new)
        # the size of the axis (counted from the end after a '...'), then eye = (range == range^T)
        axis = j if j < head else j - len(named)
        size = b.op("Gather", shape, b.const(axis, dtype="int64"), axis=0)
        r = b.op("Range", b.const(0, dtype="int64"), size, b.const(1, dtype="int64"))
        eye = b.op("Where", b.op("Equal", b.op("Reshape", r, b.const([-1, 1], dtype="int64")), r),
                   b.scalar(1.0, x), b.scalar(0.0, x))
        terms.append(c + new)
        names.append(eye)
    out = "".join(renamed)
    if ELLIPSIS in term:
        out = out[:head] + ELLIPSIS + out[head:]
    return out
