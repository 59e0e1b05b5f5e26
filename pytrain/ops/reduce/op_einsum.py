"""Einsum (opset 12): sums of products over labelled axes, e.g. ``"bij,bjk->bik"`` (batched matmul),
``"ij->ji"`` (transpose), ``"ii->i"`` (diagonal), ``"ii"`` (trace), ``"...ij,...jk"`` (ellipsis).

Labels are letters (upper and lower case differ); ``...`` stands for the same leading or middle
axes in every operand that has it, broadcast together. Without ``->`` (implicit mode) the output
is the ellipsis followed by the labels used exactly once, in alphabetical order (upper case before
lower case, as numpy sorts them). The uses of a label have one size, or 1 (broadcast, as numpy,
onnx.reference and onnxruntime do).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from pytrain.errors import GraphError, InputError
from pytrain.ops.registry import kernel

ELLIPSIS = "..."


class Equation:
    """A parsed equation: one term per operand and the output term, each a string of labels
    with at most one ``...``."""

    def __init__(self, inputs: Sequence[str], output: str) -> None:
        self.inputs = list(inputs)
        self.output = output

    def __str__(self) -> str:
        return ",".join(self.inputs) + "->" + self.output


def _check_term(equation: str, term: str, what: str) -> None:
    if term.count(ELLIPSIS) > 1:
        raise GraphError("Einsum: equation %r: the %s %r has more than one '...'" % (equation, what, term))
    letters = term.replace(ELLIPSIS, "")
    bad = [c for c in letters if not ("a" <= c <= "z" or "A" <= c <= "Z")]
    if bad:
        raise GraphError("Einsum: equation %r: the %s %r has %r where a letter or '...' was expected"
                         % (equation, what, term, bad[0]))


def labels(term: str) -> List[str]:
    """The letters of a term, in order, without its ellipsis."""
    return list(term.replace(ELLIPSIS, ""))


def parse(equation: str, n_inputs: int) -> Equation:
    """``equation`` (spaces ignored) as an explicit Equation, checked against ``n_inputs``."""
    eq = "".join(str(equation).split())
    if eq.count("->") > 1:
        raise GraphError("Einsum: equation %r has more than one '->'" % equation)
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs:
        raise GraphError("Einsum: equation %r has %d operand terms but the node has %d inputs"
                         % (equation, len(terms), n_inputs))
    for i, t in enumerate(terms):
        _check_term(equation, t, "term of input %d" % i)
    if arrow:
        _check_term(equation, rhs, "output term")
        used = set(c for t in terms for c in labels(t))
        missing = [c for c in labels(rhs) if c not in used]
        if missing:
            raise GraphError("Einsum: equation %r: output label %r is in no input term" % (equation, missing[0]))
        if len(set(labels(rhs))) != len(labels(rhs)):
            raise GraphError("Einsum: equation %r: the output term repeats a label" % equation)
        if ELLIPSIS in rhs and not any(ELLIPSIS in t for t in terms):
            raise GraphError("Einsum: equation %r: the output has '...' but no input term does" % equation)
        if ELLIPSIS not in rhs and any(ELLIPSIS in t for t in terms):
            # numpy (and so onnx.reference) cannot sum the ellipsis axes away
            raise GraphError("Einsum: equation %r: input terms have '...' but the output does not; "
                             "summing over '...' is not supported (name the axes with letters)" % equation)
        return Equation(terms, rhs)
    counts: Dict[str, int] = {}
    for t in terms:
        for c in labels(t):
            counts[c] = counts.get(c, 0) + 1
    once = "".join(sorted(c for c, k in counts.items() if k == 1))
    return Equation(terms, (ELLIPSIS if any(ELLIPSIS in t for t in terms) else "") + once)


def _check_sizes(eq: Equation, operands: Sequence[np.ndarray]) -> None:
    sizes: Dict[str, Tuple[int, int]] = {}
    for i, (t, x) in enumerate(zip(eq.inputs, operands)):
        named = labels(t)
        if (ELLIPSIS in t and x.ndim < len(named)) or (ELLIPSIS not in t and x.ndim != len(named)):
            raise InputError("Einsum %s: input %d has shape %s, which does not fit the term %r"
                             % (eq, i, x.shape, t))
        head = t.split(ELLIPSIS)[0] if ELLIPSIS in t else t
        dims = list(x.shape[:len(head)]) + list(x.shape[x.ndim - (len(named) - len(head)):])
        for c, d in zip(named, dims):
            if c in sizes and d != 1 and sizes[c][0] not in (1, d):
                raise InputError("Einsum %s: label %r has size %d in input %d but %d in input %d"
                                 % (eq, c, sizes[c][0], sizes[c][1], d, i))
            if c not in sizes or sizes[c][0] == 1:
                sizes[c] = (d, i)


@kernel("Einsum")
def einsum(ctx, *Inputs, equation):
    eq = parse(equation, len(Inputs))
    _check_sizes(eq, Inputs)
    dtype = np.result_type(*Inputs)
    try:
        # optimize: contract pairwise through BLAS (tensordot) instead of one big nested loop
        out = np.einsum(str(eq), *Inputs, optimize=len(Inputs) > 1)
    except ValueError as e:
        raise InputError("Einsum %s: inputs of shapes %s: %s"
                         % (eq, ", ".join(str(x.shape) for x in Inputs), e))
    return (np.asarray(out, dtype=dtype),)
