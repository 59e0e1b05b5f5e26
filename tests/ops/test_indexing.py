"""Forward kernels of the indexing, scattering and padding ops (GatherElements, ScatterElements,
ScatterND, Trilu, Pad) against onnx's ReferenceEvaluator and onnxruntime: dtypes, negative
indices, every reduction of every opset, every Pad mode; bad indices are pytrain errors naming
the node, never a numpy IndexError."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ops_oracle import check, run_pytrain

from pytrain.errors import GraphError, InputError, PytrainError
from pytrain.engine.executor import Plan
from pytrain.proto import ModelProto

ORACLES = ("ref", "ort")
I64 = np.int64


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def ints(*rows, dtype=I64):
    return np.array(rows[0] if len(rows) == 1 else rows, dtype=dtype)


def values(shape, dtype, seed=0):
    """Distinct-ish values of ``dtype`` (small integers for integer types, True/False for bool)."""
    r = np.random.default_rng(seed)
    if dtype == np.bool_:
        return r.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        return r.integers(1, 9, shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


# ---- GatherElements -------------------------------------------------------------------------------
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_])
def test_gather_elements_dtypes(dtype, oracle):
    check("GatherElements", [values((3, 4), dtype), ints([0, -1, 2, 1], [2, 0, -3, 1], [1, 1, 1, -1])],
          {"axis": 0}, opset=13, oracle=oracle)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("axis,shape", [(0, (4, 3, 2)), (1, (2, 5, 2)), (2, (2, 3, 1)), (-1, (2, 3, 3)),
                                        (-3, (1, 3, 2))])
def test_gather_elements_3d_axes_and_negative_indices(axis, shape, oracle):
    if axis < 0 and oracle == "ref":
        pytest.skip("onnx's reference GatherElements mishandles a negative axis")
    dim = (2, 3, 2)[axis]
    idx = np.random.default_rng(5).integers(-dim, dim, shape)  # negative ones count from the end
    check("GatherElements", [rnd(2, 3, 2), idx], {"axis": axis}, opset=13, oracle=oracle)


def test_gather_elements_int32_indices_and_opset_11():
    for oracle in ORACLES:
        check("GatherElements", [rnd(3, 3), ints([2, -1, 0], [0, 1, 1], [-3, 2, 2], dtype=np.int32)], {"axis": 1},
              opset=11, oracle=oracle)


def test_gather_elements_indices_smaller_than_data():
    # torch.gather and onnxruntime accept indices narrower than data off the axis (onnx's reference does not)
    check("GatherElements", [rnd(4, 5), ints([4, 0, -1], [1, 2, 3])], {"axis": 1}, opset=13, oracle="ort")
    check("GatherElements", [rnd(4, 5), ints([[3]])], {"axis": 0}, opset=13, oracle="ort")
    check("GatherElements", [rnd(4, 5), np.zeros((0, 5), I64)], {"axis": 0}, opset=13, oracle="ort")


def test_gather_elements_errors():
    x = rnd(3, 4)
    with pytest.raises(InputError, match=r"GatherElements: indices must lie in \[-3, 3\).*from -4 to 3"):
        run_pytrain("GatherElements", [x, ints([0, 3, -4, 1])[None]], {"axis": 0})
    with pytest.raises(InputError, match="GatherElements: indices must have the rank of data"):
        run_pytrain("GatherElements", [x, ints(0, 1)], {})
    with pytest.raises(InputError, match="exceeds data shape"):
        run_pytrain("GatherElements", [x, np.zeros((4, 1), I64)], {"axis": 1})
    with pytest.raises(InputError, match="indices must be integers"):
        run_pytrain("GatherElements", [x, np.zeros((1, 4), np.float32)], {})
    with pytest.raises(GraphError, match="GatherElements: axis 2"):
        run_pytrain("GatherElements", [x, np.zeros((1, 4), I64)], {"axis": 2})


# ---- ScatterElements ------------------------------------------------------------------------------
REPEATED = ints([1, 1, 2, 0], [1, 0, -1, 0], [1, 2, 2, 0])


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("reduction,opset", [("none", 11), ("none", 13), ("none", 18), ("add", 16), ("mul", 16),
                                             ("add", 18), ("mul", 18), ("max", 18), ("min", 18)])
def test_scatter_elements_reductions_with_repeated_indices(reduction, opset, oracle):
    # repeated indices with "none": the last write in C order wins, as in onnxruntime and onnx's reference
    attrs = {"axis": 0} if opset < 16 else {"axis": 0, "reduction": reduction}
    check("ScatterElements", [rnd(3, 4), REPEATED, rnd(3, 4, seed=1)], attrs, opset=opset, oracle=oracle)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("dtype,reduction", [(np.float64, "add"), (np.int64, "mul"), (np.int32, "max"),
                                             (np.float16, "none"), (np.int64, "min"), (np.bool_, "none")])
def test_scatter_elements_dtypes(dtype, reduction, oracle):
    check("ScatterElements", [values((3, 4), dtype), ints([0, -1, 2, 1], [2, 0, 0, 1]), values((2, 4), dtype, 1)],
          {"axis": 0, "reduction": reduction}, opset=18, oracle=oracle)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("axis", [1, -1, 2])
def test_scatter_elements_axes_3d(axis, oracle):
    idx = ints([[[1, 0], [0, 1]], [[-1, 0], [1, 1]]])
    check("ScatterElements", [rnd(2, 2, 2), idx, rnd(2, 2, 2, seed=2)], {"axis": axis, "reduction": "add"},
          opset=16, oracle=oracle)


def test_scatter_elements_smaller_updates_and_empty():
    check("ScatterElements", [rnd(4, 5), ints([4, 0, -1], [1, 2, 3]), rnd(2, 3, seed=3)], {"axis": 1},
          opset=13, oracle="ort")
    check("ScatterElements", [rnd(4, 5), np.zeros((0, 5), I64), rnd(0, 5)], {"axis": 0}, opset=13, oracle="ort")


def test_scatter_elements_errors():
    x = rnd(3, 4)
    with pytest.raises(InputError, match=r"ScatterElements: indices must lie in \[-4, 4\)"):
        run_pytrain("ScatterElements", [x, ints([[4]]), rnd(1, 1)], {"axis": 1}, opset=13)
    with pytest.raises(InputError, match="updates shape"):
        run_pytrain("ScatterElements", [x, ints([[1, 2]]), rnd(1, 3)], {}, opset=13)
    with pytest.raises(InputError, match="updates are float64"):
        run_pytrain("ScatterElements", [x, ints([[1, 2]]), rnd(1, 2, dtype=np.float64)], {}, opset=13)
    with pytest.raises(GraphError, match="reduction 'max' needs opset 18 or later, the model has opset 16"):
        run_pytrain("ScatterElements", [x, ints([[1, 2]]), rnd(1, 2)], {"reduction": "max"}, opset=16)
    with pytest.raises(GraphError, match="reduction 'add' needs opset 16"):
        run_pytrain("ScatterElements", [x, ints([[1, 2]]), rnd(1, 2)], {"reduction": "add"}, opset=13)
    with pytest.raises(GraphError, match="reduction 'sum' is not one of add, max, min, mul, none"):
        run_pytrain("ScatterElements", [x, ints([[1, 2]]), rnd(1, 2)], {"reduction": "sum"}, opset=18)


# ---- ScatterND ----------------------------------------------------------------------------------
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("reduction,opset", [("none", 11), ("none", 13), ("add", 16), ("mul", 16), ("max", 18),
                                             ("min", 18)])
@pytest.mark.parametrize("indices,updates_shape", [
    (ints([[1], [-1], [1]]), (3, 3, 2)),          # slices along the first axis, repeated
    (ints([[1, 2], [-4, 0], [1, 2]]), (3, 2)),    # rows of the last axis
    (ints([[0, 1, 1], [3, -1, 0]]), (2,)),        # single elements
    (ints([[[2], [0]], [[2], [3]]]), (2, 2, 3, 2)),  # a 2-D batch of index tuples
])
def test_scatter_nd(indices, updates_shape, reduction, opset, oracle):
    # repeated index tuples with "none" are undefined by the spec; onnxruntime and onnx's reference
    # write in C order, so the last wins, and so does pytrain
    attrs = {} if reduction == "none" else {"reduction": reduction}
    check("ScatterND", [rnd(4, 3, 2), indices, rnd(*updates_shape, seed=4)], attrs, opset=opset, oracle=oracle)


def test_scatter_nd_repeated_indices_none_last_write_wins():
    data, idx, upd = np.zeros((4, 2), np.float32), ints([[2], [0], [2], [2]]), rnd(4, 2)
    (got,) = run_pytrain("ScatterND", [data, idx, upd], {}, opset=13)
    np.testing.assert_array_equal(got, np.array([upd[1], [0, 0], upd[3], [0, 0]]))
    check("ScatterND", [data, idx, upd], {}, opset=13, oracle="ort")


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.int32])
def test_scatter_nd_dtypes(dtype, oracle):
    check("ScatterND", [values((3, 3), dtype), ints([[1], [0]]), values((2, 3), dtype, 1)],
          {"reduction": "add"}, opset=16, oracle=oracle)


def test_scatter_nd_errors():
    x = rnd(3, 4)
    with pytest.raises(InputError, match=r"ScatterND: indices must lie in \[-4, 4\) for axis 1"):
        run_pytrain("ScatterND", [x, ints([[0, 4]]), rnd(1)], {}, opset=13)
    with pytest.raises(InputError, match="exceeds the rank 2"):
        run_pytrain("ScatterND", [x, ints([[0, 1, 0]]), rnd(1)], {}, opset=13)
    with pytest.raises(InputError, match=r"updates shape \(2,\) must be indices.shape\[:-1\] \+ data.shape\[1:\]"):
        run_pytrain("ScatterND", [x, ints([[0], [1]]), rnd(2)], {}, opset=13)
    with pytest.raises(GraphError, match="reduction 'min' needs opset 18"):
        run_pytrain("ScatterND", [x, ints([[0, 1]]), rnd(1)], {"reduction": "min"}, opset=17)


# ---- Trilu ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -7, -2, -1, 0, 1, 3, 9])
def test_trilu(k, upper, oracle):
    x = rnd(2, 3, 5)
    check("Trilu", [x] if k is None else [x, np.array(k, I64)], {"upper": upper}, opset=14, oracle=oracle)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32, np.bool_, np.float16])
def test_trilu_dtypes_and_shapes(dtype, oracle):
    check("Trilu", [values((4, 3), dtype), np.array([1], I64)], {"upper": 0}, opset=14, oracle=oracle)
    check("Trilu", [values((2, 1, 3, 3), dtype)], {}, opset=14, oracle=oracle)
    check("Trilu", [values((0, 3), dtype)], {}, opset=14, oracle=oracle)


def test_trilu_zeroes_infinities_and_errors():
    x = np.full((3, 3), np.inf, np.float32)
    (got,) = run_pytrain("Trilu", [x], {"upper": 1}, opset=14)
    np.testing.assert_array_equal(got, np.triu(x))  # zeros below, not inf * 0 = NaN
    with pytest.raises(InputError, match="Trilu: input must have rank >= 2"):
        run_pytrain("Trilu", [rnd(3)], {}, opset=14)
    with pytest.raises(InputError, match="Trilu: k must be one integer"):
        run_pytrain("Trilu", [rnd(3, 3), np.array(1.0, np.float32)], {}, opset=14)


# ---- Pad (every mode, with cropping and axes) -------------------------------------------------------
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [
    ((1, 2, 2, 1), None),
    ((-1, 2, 2, -2), None),         # crop the begin of axis 0 and the end of axis 1, pad the others
    ((2, -1, 0, 2), (-1, 0)),       # opset-18 axes input, negative axes
    ((0, 3, 0, 0, 0, 4), (0, 1, 2)),
])
def test_pad_every_mode(mode, pads, axes, oracle):
    if oracle == "ref" and min(pads) < 0:
        pytest.skip("onnx's reference Pad (np.pad) does not crop")
    x = rnd(4, 5, 6)  # reflect needs every pad below the (cropped) axis length
    p = ints(*pads)
    if axes is None:
        p = ints(*(list(pads[:2]) + [0] + list(pads[2:]) + [0]))  # rank 3: axis 2 untouched
    inputs = [x, p, np.array(0.5, np.float32) if mode == "constant" else None]
    if axes is not None:
        inputs.append(ints(*axes))
    check("Pad", inputs, {"mode": mode}, opset=19, oracle=oracle)


# ---- errors through the executor name the node ------------------------------------------------------
@pytest.mark.parametrize("op,inputs,attrs", [
    ("GatherElements", [rnd(3, 4), ints([[0, 7, 1, 2]])], {"axis": 1}),
    ("ScatterElements", [rnd(3, 4), ints([[-5, 0, 1, 2]]), rnd(1, 4)], {"axis": 1}),
    ("ScatterND", [rnd(3, 4), ints([[3]]), rnd(1, 4)], {}),
])
def test_out_of_range_indices_name_the_node(op, inputs, attrs):
    names = ["d", "i", "u"][:len(inputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], name="my_" + op, **attrs)], "g", [],
        [helper.make_empty_tensor_value_info("y")],
        [onnx.numpy_helper.from_array(v, k) for k, v in zip(names, inputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    plan = Plan(ModelProto.FromString(model.SerializeToString()).graph, [], ["y"], opset=18)
    with pytest.raises(PytrainError, match=r"node 'my_%s' \(%s\): .*indices must lie in" % (op, op)) as err:
        plan.run([])
    assert not isinstance(err.value, IndexError)


def test_last_writers_fast_path_equals_the_stable_sort():
    from pytrain.ops.shape._indices import last_by_sort, last_writers

    pos = np.random.default_rng(9).integers(0, 50, 400)
    keep = last_writers(pos, 50)
    np.testing.assert_array_equal(keep, last_by_sort(pos))
    # exactly one writer per written position, and it is the last occurrence
    assert sorted(pos[keep]) == sorted(set(pos.tolist()))
    for q in set(pos.tolist()):
        assert keep[np.flatnonzero(pos == q)[-1]]
    assert last_by_sort(np.zeros(0, np.intp)).shape == (0,)


@pytest.mark.parametrize("shape,idx,batch_dims", [
    ((2, 3, 4), [[0, 1], [1, 2]], 0),
    ((2, 3, 4), [[1], [0]], 0),
    ((2, 3, 4), [[-1, 0, 3]], 0),
    ((2, 3, 4), [[1], [2]], 1),
    ((2, 3, 4), [[[1, 0]], [[2, 3]]], 1),
    ((2, 3, 2, 2), [[[1], [0]], [[2], [2]]], 1),
    ((2, 3, 4), [[[1], [3], [0]], [[2], [2], [1]]], 2),
])
@pytest.mark.parametrize("oracle", ["ref", "ort"])
def test_gather_nd(shape, idx, batch_dims, oracle):
    data = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    check("GatherND", [data, np.array(idx, np.int64)], {"batch_dims": batch_dims}, opset=13, oracle=oracle)
    check("GatherND", [np.arange(np.prod(shape), dtype=np.int64).reshape(shape), np.array(idx, np.int64)],
          {"batch_dims": batch_dims}, opset=13, oracle=oracle)


def test_gather_nd_out_of_range_and_bad_batch_dims():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(InputError, match="GatherND: indices must lie in"):
        run_pytrain("GatherND", [data, np.array([[2, 0]], np.int64)], {})
    with pytest.raises(GraphError, match="batch_dims 2"):
        run_pytrain("GatherND", [data, np.array([[1]], np.int64)], {"batch_dims": 2})
