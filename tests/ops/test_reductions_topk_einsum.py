"""Forward kernels of ReduceL1/L2/SumSquare/LogSum/LogSumExp, CumSum, TopK and Einsum against
onnx's ReferenceEvaluator and onnxruntime, in the opset 13 (axes attribute) and 18 (axes input)
forms, with several dtypes, plus the errors for what pytrain refuses."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import assert_same, check, run_ort, run_pytrain, run_reference

from pytrain.errors import GraphError, InputError, UnsupportedOpError

NORMS = ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def data_for(op, shape, dtype=np.float32, seed=0):
    x = rnd(*shape, seed=seed, dtype=np.float64)
    if op == "ReduceLogSum":  # a positive sum
        x = np.abs(x) + 0.1
    if np.dtype(dtype).kind in "iu":
        x = np.round(x * 3)
    return x.astype(dtype)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if np.dtype(dtype) != np.float16 else dict(rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------- reductions
@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("oracle", ["ref", "ort"])
@pytest.mark.parametrize("axes", [None, [1], [0, -1], [-1, 0, 1]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_norms_opset13_axes_attribute(op, oracle, axes, keepdims):
    check(op, [data_for(op, (2, 3, 4))], {"axes": axes, "keepdims": keepdims}, opset=13, oracle=oracle)


@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("oracle", ["ref", "ort"])
@pytest.mark.parametrize("axes", [None, [1], [0, -1], []])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("noop", [0, 1])
def test_norms_opset18_axes_input(op, oracle, axes, keepdims, noop):
    ax = None if axes is None else np.array(axes, dtype=np.int64)
    check(op, [data_for(op, (2, 3, 4)), ax], {"keepdims": keepdims, "noop_with_empty_axes": noop},
          opset=18, oracle=oracle)


@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64])
def test_norms_dtypes(op, dtype):
    if np.dtype(dtype).kind in "iu" and op in ("ReduceLogSum", "ReduceLogSumExp"):
        with pytest.raises(UnsupportedOpError, match="%s: input of type %s" % (op, np.dtype(dtype))):
            run_pytrain(op, [data_for(op, (2, 3), dtype)], {"axes": [1]}, opset=13)
        return
    x = data_for(op, (3, 5), dtype)
    # onnx.reference widens int32 sums to int64 (numpy's sum), the spec keeps int32 as ORT does
    check(op, [x, np.array([1])], {}, opset=18, oracle="ort" if x.dtype == np.int32 else "ref", **_tol(dtype))
    if dtype != np.float16:
        check(op, [x], {"axes": [0], "keepdims": 0}, opset=13, oracle="ort", **_tol(dtype))


def test_norms_on_rank0_and_on_the_empty_set():
    for op in NORMS:
        # onnx.reference fails on rank 0 for ReduceLogSumExp: onnxruntime is the oracle there
        check(op, [np.array(2.5, np.float32)], {}, opset=18, oracle="ort")
        check(op, [np.array(2.5, np.float32)], {"keepdims": 0}, opset=13, oracle="ort")
        # reducing an empty axis: 0 for the sums, log 0 = -inf for the logarithms
        check(op, [np.zeros((2, 0, 3), np.float32), np.array([1])], {}, opset=18)
        check(op, [np.zeros((2, 0, 3), np.float32)], {"axes": [1], "keepdims": 0}, opset=13)


def test_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1e4, -1e4 - 1, 0.0], [-np.inf, -np.inf, -np.inf],
                  [np.inf, 1.0, 2.0], [-np.inf, 3.0, 3.0]], np.float32)
    got = run_pytrain("ReduceLogSumExp", [x], {"axes": [1], "keepdims": 0}, opset=13)[0]
    # row 1: the max is the 0, the other terms are exp(-1e4) = 0; naive exp overflows in row 0
    want = np.array([1000 + np.log(2), 0.0, -np.inf, np.inf, 3 + np.log(2)])
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
    assert got.dtype == np.float32
    x64 = np.array([[700.0, 710.0, 690.0]])  # exp(710) overflows float64 on its own
    got = run_pytrain("ReduceLogSumExp", [x64], {"axes": [1]}, opset=13)[0]
    np.testing.assert_allclose(got, [[710 + np.log1p(np.exp(-10.0) + np.exp(-20.0))]], rtol=1e-12)
    assert_same(got, run_reference("ReduceLogSumExp", [x64], {"axes": [1]}, opset=13)[0], rtol=1e-12)


def test_reduce_axes_errors():
    x = rnd(2, 3)
    with pytest.raises(GraphError, match="ReduceL2: axes 2 is out of range"):
        run_pytrain("ReduceL2", [x], {"axes": [2]}, opset=13)
    with pytest.raises(InputError, match="ReduceLogSumExp: axes -3 is out of range"):
        run_pytrain("ReduceLogSumExp", [x, np.array([-3])], {}, opset=18)
    with pytest.raises(GraphError, match="repeat an axis"):
        run_pytrain("ReduceSumSquare", [x], {"axes": [1, -1]}, opset=13)
    with pytest.raises(InputError, match="must be an integer tensor"):
        run_pytrain("ReduceL1", [x, np.array([1.0])], {}, opset=18)


# ---------------------------------------------------------------- CumSum
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1, np.int32(-3)])
@pytest.mark.parametrize("oracle", ["ref", "ort"])
def test_cumsum(exclusive, reverse, axis, oracle):
    ax = np.array(axis, dtype=np.int32 if isinstance(axis, np.int32) else np.int64)
    check("CumSum", [rnd(2, 3, 4), ax], {"exclusive": exclusive, "reverse": reverse}, opset=14, oracle=oracle)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.float16])
def test_cumsum_dtypes(dtype):
    x = (rnd(5, 3, dtype=np.float64) * 4).round().astype(dtype)
    for exclusive in (0, 1):
        for reverse in (0, 1):
            attrs = {"exclusive": exclusive, "reverse": reverse}
            check("CumSum", [x, np.array(0)], attrs, opset=14, oracle="ref", **_tol(dtype))
            if dtype != np.float16:
                check("CumSum", [x, np.array(1)], attrs, opset=11, oracle="ort")
    check("CumSum", [np.arange(6, dtype=dtype), np.array(0)], {}, opset=14, oracle="ref")


def test_cumsum_errors():
    with pytest.raises(InputError, match="CumSum: axis 2 is out of range"):
        run_pytrain("CumSum", [rnd(2, 3), np.array(2)], {})
    # a one-element 1-D axis is accepted (as onnxruntime does), a longer one is not
    check("CumSum", [rnd(2, 3), np.array([1])], {}, opset=14, oracle="ort")
    with pytest.raises(InputError, match="CumSum: input axis must be"):
        run_pytrain("CumSum", [rnd(2, 3), np.array([0, 1])], {})
    with pytest.raises(InputError, match="rank >= 1"):
        run_pytrain("CumSum", [np.array(1.0, np.float32), np.array(0)], {})


# ---------------------------------------------------------------- TopK
TIES = np.array([[3, 1, 3, 2, 3, 1], [0, 0, 0, 0, 0, 0], [5, -1, 2, 2, 7, 2]], np.float32)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("k", [0, 1, 3, 6])
@pytest.mark.parametrize("oracle", ["ref", "ort"])
def test_topk_ties_lower_index_first(largest, k, oracle):
    check("TopK", [TIES, np.array([k])], {"axis": 1, "largest": largest}, n_outputs=2, opset=11, oracle=oracle)
    check("TopK", [TIES.T.copy(), np.array([min(k, 3)])], {"axis": 0, "largest": largest}, n_outputs=2,
          opset=11, oracle=oracle)


def test_topk_tie_order_explicitly():
    vals, idx = run_pytrain("TopK", [TIES, np.array([4])], {"axis": -1}, n_outputs=2, opset=11)
    np.testing.assert_array_equal(idx, [[0, 2, 4, 3], [0, 1, 2, 3], [4, 0, 2, 3]])
    vals, idx = run_pytrain("TopK", [TIES, np.array([4])], {"axis": -1, "largest": 0}, n_outputs=2, opset=11)
    np.testing.assert_array_equal(idx, [[1, 5, 3, 0], [0, 1, 2, 3], [1, 2, 3, 5]])
    assert idx.dtype == np.int64 and vals.dtype == np.float32


def _same_selection(x, got, ref, axis):
    """sorted=0 leaves the order open: compare the selected indices as sets, and the values as
    what X holds at them."""
    np.testing.assert_array_equal(np.sort(got[1], axis=axis), np.sort(ref[1], axis=axis))
    np.testing.assert_array_equal(got[0], np.take_along_axis(x, got[1], axis=axis))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint8, np.float16])
@pytest.mark.parametrize("oracle", ["ref", "ort"])
def test_topk_dtypes_and_axes(dtype, oracle):
    x = (np.abs(rnd(3, 4, 5, dtype=np.float64)) * 5).round().astype(dtype)  # many ties
    for axis in (0, 1, -1):
        for largest in (0, 1):
            attrs = {"axis": axis, "largest": largest}
            check("TopK", [x, np.array([2])], attrs, n_outputs=2, opset=11, oracle=oracle)
            # sorted=0: any order is allowed; pytrain still sorts, onnxruntime may not
            run = run_ort if oracle == "ort" else run_reference
            attrs["sorted"] = 0
            ref = run("TopK", [x, np.array([2])], attrs, 2, 11)
            _same_selection(x, run_pytrain("TopK", [x, np.array([2])], attrs, 2, 11), ref, axis)


def test_topk_opset_forms():
    x = rnd(4, 6)
    check("TopK", [x], {"k": 3}, n_outputs=2, opset=1, oracle="ref")
    check("TopK", [x, np.array([3])], {"axis": 0}, n_outputs=2, opset=10, oracle="ort")
    check("TopK", [x, np.array([2])], {}, n_outputs=2, opset=11, oracle="ort")


def test_topk_errors():
    with pytest.raises(InputError, match="TopK: K=7 must be in 0..6"):
        run_pytrain("TopK", [rnd(4, 6), np.array([7])], {}, n_outputs=2, opset=11)
    with pytest.raises(InputError, match="TopK: K=-1"):
        run_pytrain("TopK", [rnd(4, 6), np.array([-1])], {}, n_outputs=2, opset=11)
    with pytest.raises(InputError, match="TopK: input K must hold one value"):
        run_pytrain("TopK", [rnd(4, 6), np.array([1, 2])], {}, n_outputs=2, opset=11)
    with pytest.raises(GraphError, match="TopK: axis 2 is out of range"):
        run_pytrain("TopK", [rnd(4, 6), np.array([1])], {"axis": 2}, n_outputs=2, opset=11)


# ---------------------------------------------------------------- Einsum
EINSUM = [
    # (equation, operand shapes, oracles)
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], "ref ort"),          # batched matmul
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)], "ref ort"),  # attention scores (HF)
    ("bhqk,bhkd->bhqd", [(2, 2, 3, 5), (2, 2, 5, 4)], "ref ort"),
    ("bld,lrd->blr", [(2, 3, 4), (3, 5, 4)], "ref ort"),           # relative position (HF)
    ("ij->ji", [(3, 4)], "ref ort"),
    ("ij->", [(3, 4)], "ref ort"),
    ("ij,ij->i", [(3, 4), (3, 4)], "ref ort"),
    ("i,j->ij", [(3,), (4,)], "ref ort"),                          # outer product
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "ref ort"),
    ("ii->i", [(3, 3)], "ref ort"),                                # diagonal
    ("ii", [(3, 3)], "ref ort"),                                   # trace (implicit)
    ("bii->bi", [(2, 3, 3)], "ref ort"),                           # batched diagonal
    ("i...i->...i", [(3, 2, 3)], "ref ort"),                       # diagonal around '...'
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)], "ref ort"),                # implicit output bik
    ("bIj,bjK", [(2, 3, 4), (2, 4, 5)], "ref"),                    # implicit, upper case first: IK... sorted
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], "ref ort"),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (2, 4, 5)], "ref"),      # ellipsis broadcast (ORT refuses ranks 2 vs 1)
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)], "ref"),                # implicit with ellipsis
    ("b...c->c...b", [(2, 3, 4, 5)], "ref ort"),
    ("i...j,j->i...", [(2, 3, 4), (4,)], "ref ort"),
    ("ij,jk->ik", [(2, 1), (3, 4)], "ref ort"),                    # size-1 label broadcast
    (" ij , jk -> ik ", [(2, 3), (3, 4)], "ref ort"),              # spaces
]


@pytest.mark.parametrize("eq,shapes,oracles", EINSUM, ids=[e[0].strip() + str(e[1]) for e in EINSUM])
def test_einsum(eq, shapes, oracles):
    xs = [rnd(*s, seed=i) for i, s in enumerate(shapes)]
    for oracle in oracles.split():
        check("Einsum", xs, {"equation": eq}, opset=12, oracle=oracle, rtol=1e-5, atol=1e-5)


def test_einsum_dtypes():
    a = (rnd(3, 4, dtype=np.float64) * 3).round()
    b = (rnd(4, 2, seed=1, dtype=np.float64) * 3).round()
    for dtype in (np.float64, np.int32, np.int64):
        check("Einsum", [a.astype(dtype), b.astype(dtype)], {"equation": "ij,jk->ik"}, opset=12, oracle="ort")
    check("Einsum", [a.astype(np.float16), b.astype(np.float16)], {"equation": "ij,jk->ik"}, opset=12,
          oracle="ref", rtol=2e-3, atol=2e-3)


def test_einsum_errors():
    a, b = rnd(2, 3), rnd(3, 4)
    with pytest.raises(GraphError, match="2 operand terms but the node has 1 inputs"):
        run_pytrain("Einsum", [a], {"equation": "ij,jk->ik"})
    with pytest.raises(GraphError, match="output label 'z' is in no input term"):
        run_pytrain("Einsum", [a, b], {"equation": "ij,jk->iz"})
    with pytest.raises(GraphError, match="repeats a label"):
        run_pytrain("Einsum", [a, b], {"equation": "ij,jk->ii"})
    with pytest.raises(GraphError, match="'1' where a letter"):
        run_pytrain("Einsum", [a, b], {"equation": "i1,jk->ik"})
    with pytest.raises(GraphError, match="more than one '...'"):
        run_pytrain("Einsum", [a], {"equation": "...i...->i"})
    with pytest.raises(GraphError, match="summing over '...' is not supported"):
        run_pytrain("Einsum", [rnd(2, 3, 4), rnd(2, 3, 5)], {"equation": "...ij,...ik->jk"})
    with pytest.raises(InputError, match="label 'j' has size 3 in input 0 but 2 in input 1"):
        run_pytrain("Einsum", [a, rnd(2, 4)], {"equation": "ij,jk->ik"})
    with pytest.raises(InputError, match="does not fit the term"):
        run_pytrain("Einsum", [a, b], {"equation": "ijk,jk->i"})
    # the oracles agree that these are errors
    with pytest.raises(Exception):
        run_ort("Einsum", [a, rnd(2, 4)], {"equation": "ij,jk->ik"}, opset=12)
