"""Forward kernels of the shape, indexing, constant and reduction ops against onnx's
ReferenceEvaluator / onnxruntime; plus the Python 3.8 compatibility check of pytrain/ops."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from ops_oracle import assert_same, check, run_pytrain

from pytrain.errors import GraphError, InputError

I64 = np.int64


def rnd(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def ints(*v):
    return np.array(v, dtype=I64)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    check("Flatten", [rnd(2, 3, 4)], {"axis": axis} if axis != 1 else {})


def test_flatten_error():
    with pytest.raises(GraphError, match="Flatten: axis 4"):
        run_pytrain("Flatten", [rnd(2, 3, 4)], {"axis": 4})


@pytest.mark.parametrize("shape,allowzero", [((4, 6), 0), ((0, -1), 0), ((-1,), 0), ((2, -1, 3), 0),
                                             ((0, 4, 0), 0), ((3, 4, 2), 1), ((2, 2, 2, 3), 0)])
def test_reshape(shape, allowzero):
    check("Reshape", [rnd(3, 4, 2), ints(*shape)], {"allowzero": allowzero} if allowzero else {}, opset=14)


def test_reshape_allowzero_empty_and_errors():
    check("Reshape", [rnd(0, 4), ints(0, 2, 2)], {"allowzero": 1}, opset=14)
    x = rnd(3, 4)
    with pytest.raises(InputError, match="more than one -1"):
        run_pytrain("Reshape", [x, ints(-1, -1)], {})
    with pytest.raises(InputError, match="cannot reshape"):
        run_pytrain("Reshape", [x, ints(5, 2)], {})
    with pytest.raises(InputError, match="both 0 and -1"):
        run_pytrain("Reshape", [x, ints(0, -1)], {"allowzero": 1})
    with pytest.raises(InputError, match="cannot infer -1"):
        run_pytrain("Reshape", [x, ints(5, -1)], {})


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 0, 2]])
def test_transpose(perm):
    check("Transpose", [rnd(2, 3, 4)], {} if perm is None else {"perm": perm})
    if perm:
        with pytest.raises(GraphError, match="Transpose: perm"):
            run_pytrain("Transpose", [rnd(2, 3)], {"perm": perm})


@pytest.mark.parametrize("axes", [None, [1], [1, -1], [-4]])
def test_squeeze(axes):
    x = rnd(1, 1, 3, 1)
    check("Squeeze", [x, None if axes is None else ints(*axes)], opset=13)
    check("Squeeze", [x], {} if axes is None else {"axes": axes}, opset=11)


@pytest.mark.parametrize("axes", [[0], [1], [-1], [0, 3], [4, 0, -3]])
def test_unsqueeze(axes):
    x = rnd(2, 3)
    # the reference inserts unsorted axes one by one (wrong for [4, 0, -3]): onnxruntime is the oracle
    check("Unsqueeze", [x, ints(*axes)], opset=13, oracle="ort")
    check("Unsqueeze", [x], {"axes": axes}, opset=11, oracle="ort")
    check("Unsqueeze", [np.array(1.5, np.float32), ints(0)], opset=13)


def test_squeeze_unsqueeze_errors():
    with pytest.raises(InputError, match="Squeeze: axis 1 of input shape"):
        run_pytrain("Squeeze", [rnd(1, 2), ints(1)], {})
    with pytest.raises(InputError, match="repeat an axis"):
        run_pytrain("Unsqueeze", [rnd(2), ints(0, 0)], {})
    with pytest.raises(InputError, match="out of range"):
        run_pytrain("Unsqueeze", [rnd(2), ints(3)], {})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] = i + 1
    check("Concat", [rnd(*s, seed=i) for i, s in enumerate(shapes)], {"axis": axis})
    check("Concat", [rnd(2, 3)], {"axis": axis % 2})


def test_concat_errors():
    with pytest.raises(InputError, match="Concat: input 1 has shape"):
        run_pytrain("Concat", [rnd(2, 3), rnd(3, 3)], {"axis": 1})
    with pytest.raises(GraphError, match="axis is required"):
        run_pytrain("Concat", [rnd(2, 3)], {})


@pytest.mark.parametrize("axis,split,n", [(0, None, 2), (1, [1, 2, 3], 3), (-1, [4, 0], 2), (1, None, 3)])
def test_split_input_form(axis, split, n):
    x = rnd(4, 6, 4)
    check("Split", [x, None if split is None else ints(*split)], {"axis": axis}, n_outputs=n, opset=13)
    check("Split", [x], {"axis": axis} if split is None else {"axis": axis, "split": split},
          n_outputs=n, opset=11)


@pytest.mark.parametrize("dim,n", [(6, 3), (7, 3), (5, 2), (4, 4)])
def test_split_num_outputs(dim, n):
    check("Split", [rnd(2, dim)], {"axis": 1, "num_outputs": n}, n_outputs=n, opset=18)


def test_split_errors():
    with pytest.raises(InputError, match="do not add up"):
        run_pytrain("Split", [rnd(4, 6), ints(1, 2)], {"axis": 1}, n_outputs=2)
    with pytest.raises(InputError, match="does not split evenly"):
        run_pytrain("Split", [rnd(4, 7)], {"axis": 1}, n_outputs=2)


SLICES = [
    ([1], [3], None, None),
    ([0, 1], [2, -1], [0, 2], None),
    ([-3], [100], [1], None),
    ([-100], [2], [-1], None),
    ([3], [0], [1], [-1]),
    ([-1], [-100], [2], [-2]),
    ([10], [-10], [0], [-1]),
    ([0, 5], [4, -7], [2, 1], [2, -2]),
    ([2], [2], [0], None),
    ([9223372036854775807], [-9223372036854775807], [1], [-1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(starts, ends, axes, steps):
    x = rnd(4, 5, 6)
    check("Slice", [x, ints(*starts), ints(*ends), None if axes is None else ints(*axes),
                    None if steps is None else ints(*steps)], opset=13)


def test_slice_errors():
    x = rnd(4, 5)
    with pytest.raises(InputError, match="step for axis 0 is 0"):
        run_pytrain("Slice", [x, ints(0), ints(2), ints(0), ints(0)], {})
    with pytest.raises(InputError, match="same length"):
        run_pytrain("Slice", [x, ints(0, 1), ints(2), None, None], {})
    with pytest.raises(InputError, match="repeat an axis"):
        run_pytrain("Slice", [x, ints(0, 1), ints(2, 3), ints(1, -1), None], {})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx", [[0, 2, -1], [[1, 0], [-2, 2]], 1])
def test_gather(axis, idx):
    check("Gather", [rnd(3, 4, 5), np.array(idx, dtype=I64)], {"axis": axis})
    check("Gather", [rnd(3, 4, 5), np.array(idx, dtype=np.int32)], {"axis": axis})


def test_gather_errors():
    with pytest.raises(InputError, match=r"Gather: indices must lie in \[-3, 3\)"):
        run_pytrain("Gather", [rnd(3, 4), ints(0, 3)], {})
    with pytest.raises(GraphError, match="Gather: axis 2 is out of range"):
        run_pytrain("Gather", [rnd(3, 4), ints(0)], {"axis": 2})


def test_identity_shape_size():
    x = rnd(2, 3, 4)
    out = check("Identity", [x])
    assert out[0] is x
    check("Shape", [x])
    check("Size", [x])
    for start, end in [(1, None), (0, -1), (-2, None), (-10, 10), (2, 1)]:
        attrs = {"start": start}
        if end is not None:
            attrs["end"] = end
        check("Shape", [x], attrs, opset=15)


@pytest.mark.parametrize("attrs", [
    {"value": rnd(2, 3)}, {"value": ints(4, 5)}, {"value_float": 2.5}, {"value_floats": [1.0, 2.5]},
    {"value_int": 7}, {"value_ints": [1, 2, 3]}, {"value": np.array(3.0, np.float64)},
])
def test_constant(attrs):
    check("Constant", [], attrs, opset=13)


def test_constant_strings_and_errors():
    assert run_pytrain("Constant", [], {"value_string": "ab"})[0] == np.array("ab", dtype=object)
    assert list(run_pytrain("Constant", [], {"value_strings": [b"a", "b"]})[0]) == ["a", "b"]
    with pytest.raises(GraphError, match="exactly one value"):
        run_pytrain("Constant", [], {"value_int": 1, "value_float": 2.0})
    with pytest.raises(GraphError, match="exactly one value"):
        run_pytrain("Constant", [], {})


@pytest.mark.parametrize("value", [None, np.array([3.5], np.float32), np.array([2], I64),
                                   np.array([1], np.int32)])
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 2)])
def test_constant_of_shape(value, shape):
    check("ConstantOfShape", [np.array(shape, dtype=I64)], {"value": value}, opset=13)


def test_constant_of_shape_error():
    with pytest.raises(InputError, match="negative dimension"):
        run_pytrain("ConstantOfShape", [ints(2, -1)], {})


@pytest.mark.parametrize("xs,shape", [((3, 1), (3, 4)), ((3, 1), (2, 1, 6)), ((4,), (3, 1)),
                                      ((2, 3), (2, 3)), ((1,), ())])
def test_expand(xs, shape):
    out = check("Expand", [rnd(*xs), np.array(shape, dtype=I64)])
    assert out[0].flags.writeable


def test_expand_error():
    with pytest.raises(InputError, match="Expand: shapes"):
        run_pytrain("Expand", [rnd(3, 2), ints(3, 4)], {})


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, I64), (10, 0, -2, I64), (0, 0, 1, I64), (1.0, 2.0, 0.3, np.float32),
    (5.0, -1.0, -1.5, np.float32), (0, 5, 1, np.int32), (0.5, 3.0, 0.25, np.float64), (3, 1, 1, I64),
])
def test_range(start, limit, delta, dtype):
    check("Range", [np.array(start, dtype), np.array(limit, dtype), np.array(delta, dtype)])


def test_range_error():
    with pytest.raises(InputError, match="Range: delta is 0"):
        run_pytrain("Range", [ints(0)[0:1].reshape(()), np.array(3, I64), np.array(0, I64)], {})


@pytest.mark.parametrize("reps", [(1, 1), (2, 3), (1, 0), (3, 1)])
def test_tile(reps):
    check("Tile", [rnd(2, 3), ints(*reps)])
    with pytest.raises(InputError, match="Tile: repeats"):
        run_pytrain("Tile", [rnd(2, 3), ints(2)], {})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[0, 1, 2, 1], [1, 0, 0, 2], [0, 0, 0, 0], [-1, 1, 0, -2]])
def test_pad(mode, pads):
    x = rnd(4, 5)
    oracle = "ort" if min(pads) < 0 else "ref"  # the reference cannot crop (negative pads)
    check("Pad", [x, ints(*pads)], {"mode": mode}, opset=19, oracle=oracle)
    if mode == "constant":
        check("Pad", [x, ints(*pads), np.array(1.5, np.float32)], {}, opset=13, oracle=oracle)
        check("Pad", [x.astype(I64), ints(*pads), np.array(7, I64)], {}, opset=13, oracle=oracle)


def test_pad_axes_and_errors():
    x = rnd(2, 3, 4)
    check("Pad", [x, ints(1, 2, 0, 1), np.array(0.5, np.float32), ints(0, -1)], {"mode": "constant"}, opset=18)
    check("Pad", [x, ints(1, 2), None, ints(1)], {"mode": "reflect"}, opset=18)
    with pytest.raises(InputError, match="Pad: pads has 3 values"):
        run_pytrain("Pad", [x, ints(1, 2, 3)], {})
    with pytest.raises(GraphError, match="Pad: mode"):
        run_pytrain("Pad", [x, ints(0, 0, 0, 0, 0, 0)], {"mode": "mirror"})


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]
AXES = [None, [1], [0, 2], [-1], []]


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op, axes, keepdims):
    x = rnd(3, 4, 5)
    check(op, [x, None if axes is None else ints(*axes)], {"keepdims": keepdims}, opset=18)
    if axes == []:
        check(op, [x, ints()], {"keepdims": keepdims, "noop_with_empty_axes": 1}, opset=18)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes", AXES[:4])
def test_reduce_axes_attribute(op, axes):
    x = rnd(3, 4, 5)
    if op == "ReduceSum":  # axes attribute only before opset 13
        check(op, [x], {} if axes is None else {"axes": axes}, opset=11)
    else:
        check(op, [x], {"keepdims": 0} if axes is None else {"axes": axes}, opset=13)


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_ints_and_errors(op):
    x = np.random.default_rng(0).integers(-5, 6, (3, 4)).astype(I64)
    check(op, [x, ints(1)], {}, opset=18)
    check(op, [x.astype(np.int32), ints(0)], {}, opset=18)
    with pytest.raises(InputError, match="%s: axes 3 is out of range" % op):
        run_pytrain(op, [rnd(2, 2), ints(3)], {})
    with pytest.raises(GraphError, match="repeat an axis"):
        run_pytrain(op, [rnd(2, 2)], {"axes": [0, -2]})


def test_reduce_empty_set():
    x = np.zeros((2, 0), np.float32)
    assert_same(run_pytrain("ReduceMax", [x, ints(1)], {})[0], np.full((2, 1), -np.inf, np.float32))
    assert_same(run_pytrain("ReduceMin", [x, ints(1)], {"keepdims": 0})[0], np.full((2,), np.inf, np.float32))
    assert_same(run_pytrain("ReduceSum", [x, ints(1)], {"keepdims": 0})[0], np.zeros(2, np.float32))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax(op, axis, keepdims, last):
    x = np.random.default_rng(0).integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    check(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13)


def test_argmax_error():
    with pytest.raises(GraphError, match="ArgMax: axis 3"):
        run_pytrain("ArgMax", [rnd(2, 2, 2)], {"axis": 3})


def test_ops_are_python38_compatible():
    vermin = shutil.which("vermin")
    if vermin is None:
        pytest.skip("vermin is not installed")
    ops_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pytrain", "ops")
    res = subprocess.run([vermin, "-t=3.8-", "--no-tips", "--violations", ops_dir],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
