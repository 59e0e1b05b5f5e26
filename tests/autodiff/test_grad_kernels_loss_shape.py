"""SoftmaxCrossEntropyLossGrad and the indexing/shape gradient kernels (Gather, Slice, Concat,
Split, Reduce, ReduceMax) against finite differences, torch and onnxruntime; plus the Python 3.8
check of pytrain/ops/train."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from gradcheck import numeric_grad, run_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rng(seed=0):
    return np.random.default_rng(seed)


# ------------------------------------------------------------------- SoftmaxCrossEntropyLoss

def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def sce_loss(scores, labels, weights, reduction, ignore_index):
    """ONNX SoftmaxCrossEntropyLoss, written out in numpy."""
    lp = log_softmax(scores)
    ignored = labels == ignore_index if ignore_index is not None else np.zeros(labels.shape, bool)
    safe = np.where(ignored, 0, labels)
    picked = np.take_along_axis(lp, np.expand_dims(safe, 1), axis=1)[:, 0]
    w = weights[safe] if weights is not None else np.ones(labels.shape)
    w = np.where(ignored, 0.0, w)
    loss = -w * picked
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


SCE_CASES = [
    # scores shape, reduction, weighted, ignore_index
    ((5, 4), "mean", False, None),
    ((5, 4), "mean", True, None),
    ((6, 4), "mean", True, 2),
    ((6, 4), "mean", False, 1),
    ((5, 4), "sum", True, 0),
    ((5, 4), "none", True, 3),
    ((3, 4, 5), "mean", True, 1),
    ((3, 4, 5), "none", False, None),
    ((3, 4, 5), "sum", False, 2),
]


def _sce_inputs(shape, weighted, ignore_index, seed):
    scores = rng(seed).standard_normal(shape) * 2
    labels = rng(seed + 1).integers(0, shape[1], size=(shape[0],) + shape[2:])
    if ignore_index is not None:
        labels.reshape(-1)[::3] = ignore_index  # make sure some samples are ignored
    weights = rng(seed + 2).random(shape[1]) + 0.5 if weighted else None
    return scores, labels.astype(np.int64), weights


@pytest.mark.parametrize("shape,reduction,weighted,ignore_index", SCE_CASES)
def test_sce_grad_finite_differences(shape, reduction, weighted, ignore_index):
    scores, labels, weights = _sce_inputs(shape, weighted, ignore_index, 40)
    loss = sce_loss(scores, labels, weights, reduction, ignore_index)
    dloss = rng(43).standard_normal(np.shape(loss))
    (ds,) = run_kernel("SoftmaxCrossEntropyLossGrad", dloss, log_softmax(scores), labels, weights,
                       reduction=reduction, ignore_index=ignore_index)
    f = lambda s: np.sum(dloss * sce_loss(s, labels, weights, reduction, ignore_index))  # noqa: E731
    np.testing.assert_allclose(ds, numeric_grad(f, [scores], 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape,reduction,weighted,ignore_index", SCE_CASES)
def test_sce_grad_matches_torch_float32(shape, reduction, weighted, ignore_index):
    scores, labels, weights = _sce_inputs(shape, weighted, ignore_index, 50)
    scores = scores.astype(np.float32)
    w32 = weights.astype(np.float32) if weights is not None else None
    st = torch.tensor(scores, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(
        st, torch.tensor(labels), weight=None if w32 is None else torch.tensor(w32),
        reduction=reduction, ignore_index=-100 if ignore_index is None else ignore_index)
    dloss = rng(53).standard_normal(tuple(loss.shape)).astype(np.float32)
    loss.backward(torch.tensor(dloss))
    lp = torch.log_softmax(torch.tensor(scores), 1).numpy()
    (ds,) = run_kernel("SoftmaxCrossEntropyLossGrad", dloss, lp, labels, w32,
                       reduction=reduction, ignore_index=ignore_index)
    assert ds.dtype == np.float32
    np.testing.assert_allclose(ds, st.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_sce_grad_all_ignored_is_zero_like_torch():
    lp = log_softmax(rng(60).standard_normal((3, 4))).astype(np.float32)
    labels = np.array([1, 1, 1])
    (ds,) = run_kernel("SoftmaxCrossEntropyLossGrad", np.array(1.0, np.float32), lp, labels, ignore_index=1)
    np.testing.assert_array_equal(ds, np.zeros_like(lp))


def test_sce_grad_rejects_out_of_range_label():
    from pytrain.errors import KernelError
    lp = log_softmax(rng(61).standard_normal((2, 3)))
    with pytest.raises(KernelError, match="label 3 is out of range"):
        run_kernel("SoftmaxCrossEntropyLossGrad", np.array(1.0), lp, np.array([0, 3]))


# ---------------------------------------------------------------------------------- Gather

@pytest.mark.parametrize("x_shape,indices,axis", [
    ((5, 3), np.array([[0, 4], [4, -1]]), 0),   # repeats and a negative index accumulate
    ((2, 4, 3), np.array([3, 0, -4, 1]), 1),
    ((3, 4), np.array(2), 1),                   # scalar index drops the axis
    ((4, 2), np.array([], dtype=np.int64), 0),
])
def test_gather_grad(x_shape, indices, axis):
    x = rng(62).standard_normal(x_shape)
    y = np.take(x, indices, axis=axis)
    dy = rng(63).standard_normal(y.shape)
    (dx,) = run_kernel("GatherGrad", dy, indices, x, axis=axis)
    num = numeric_grad(lambda x: np.sum(dy * np.take(x, indices, axis=axis)), [x], 0)
    np.testing.assert_allclose(dx, num, rtol=1e-7, atol=1e-9)


def test_gather_grad_matches_torch_embedding_float32():
    table = rng(64).standard_normal((7, 4)).astype(np.float32)
    ids = np.array([[1, 3, 1], [6, 1, 0]])
    tt = torch.tensor(table, requires_grad=True)
    out = torch.nn.functional.embedding(torch.tensor(ids), tt)
    dy = rng(65).standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(torch.tensor(dy))
    (dx,) = run_kernel("GatherGrad", dy, ids, table)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, tt.grad.numpy(), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------- Slice

def ort_slice(x_shape, starts, ends, axes, steps):
    """onnxruntime's Slice (the oracle of ONNX's clamping rules) as a function of X."""
    given = [("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)]
    names = ["X"] + [n if v is not None else "" for n, v in given]
    while names[-1] == "":
        names.pop()
    inits = [helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in given if v is not None]
    graph = helper.make_graph([helper.make_node("Slice", names, ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.DOUBLE, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"X": x})[0]


BIG = 2 ** 63 - 1
SLICE_CASES = [
    ([1], [3], None, None),
    ([0, 1], [-1, BIG], [0, 2], None),
    ([-1], [-BIG], [1], [-1]),                # reversed, down to index 0
    ([4, 0], [0, 5], [2, -3], [-2, 2]),
    ([-10, 1], [10, 100], [-1, 0], [3, 1]),   # clamped starts/ends
    ([2], [2], [1], None),                    # empty slice
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
def test_slice_grad_is_the_adjoint_of_onnxruntime_slice(starts, ends, axes, steps):
    x = rng(66).standard_normal((3, 4, 5))
    slice_ = ort_slice(x.shape, starts, ends, axes, steps)
    y = slice_(x)
    dy = rng(67).standard_normal(y.shape)
    args = [np.array(starts, np.int64), np.array(ends, np.int64)]
    args += [None if axes is None else np.array(axes, np.int64)]
    args += [None if steps is None else np.array(steps, np.int64)]
    (dx,) = run_kernel("SliceGrad", dy, x, *args)
    # Slice is linear, so central differences are exact even with a large eps.
    num = numeric_grad(lambda x: np.sum(dy * slice_(x)), [x], 0, eps=1e-3)
    np.testing.assert_allclose(dx, num, rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------- Concat, Split

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_grad(axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    xs = []
    for i, s in enumerate(shapes):
        s = list(s)
        s[axis] = i + 1
        xs.append(rng(68 + i).standard_normal(s))
    dy = rng(71).standard_normal(np.concatenate(xs, axis=axis).shape)
    grads = run_kernel("ConcatGrad", dy, *xs, axis=axis)
    f = lambda *xs: np.sum(dy * np.concatenate(xs, axis=axis))  # noqa: E731
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, numeric_grad(f, xs, i), rtol=1e-7, atol=1e-9)
    skipped = run_kernel("ConcatGrad", dy, *xs, axis=axis, wants=(True, False, True))
    assert skipped[1] is None and skipped[2].shape == xs[2].shape


def test_split_grad_with_a_missing_gradient():
    x = rng(72).standard_normal((3, 6))
    sizes = [1, 3, 2]
    ys = np.split(x, np.cumsum(sizes)[:-1], axis=1)
    dys = [rng(73 + i).standard_normal(y.shape) for i, y in enumerate(ys)]
    dys[1] = None  # nobody read the second output
    (dx,) = run_kernel("SplitGrad", *ys, *dys, axis=-1)

    def f(x):
        parts = np.split(x, np.cumsum(sizes)[:-1], axis=1)
        return sum(np.sum(d * p) for d, p in zip(dys, parts) if d is not None)

    np.testing.assert_allclose(dx, numeric_grad(f, [x], 0), rtol=1e-7, atol=1e-9)


# ---------------------------------------------------------------------------------- Reduce

REDUCE_CASES = [
    # axes (or None), via input?, keepdims, noop_with_empty_axes
    ([1], False, 1, 0),
    ([0, 2], True, 0, 0),
    ([-1], True, 0, 0),
    (None, False, 0, 0),   # all axes
    ([], True, 1, 1),      # no-op
]


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("axes,as_input,keepdims,noop", REDUCE_CASES)
def test_reduce_grad(mode, axes, as_input, keepdims, noop):
    x = rng(76).standard_normal((2, 3, 4))
    red = np.sum if mode == "sum" else np.mean

    def forward(x):
        if not axes and noop:
            return x
        ax = tuple(axes) if axes else None
        return red(x, axis=ax, keepdims=bool(keepdims))

    dy = rng(77).standard_normal(np.shape(forward(x)))
    if as_input:
        (dx,) = run_kernel("ReduceGrad", dy, x, np.array(axes, np.int64), mode=mode, keepdims=keepdims,
                           noop_with_empty_axes=noop)
    else:
        (dx,) = run_kernel("ReduceGrad", dy, x, mode=mode, axes=axes, keepdims=keepdims,
                           noop_with_empty_axes=noop)
    np.testing.assert_allclose(dx, numeric_grad(lambda x: np.sum(dy * forward(x)), [x], 0), rtol=1e-7, atol=1e-9)
    (dx32,) = run_kernel("ReduceGrad", dy.astype(np.float32), x.astype(np.float32), mode=mode, axes=axes,
                         keepdims=keepdims, noop_with_empty_axes=noop)
    assert dx32.dtype == np.float32


@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), (None, 0)])
def test_reducemax_grad(axes, keepdims):
    x = rng(78).standard_normal((3, 4, 2))
    ax = tuple(axes) if axes else None
    y = np.max(x, axis=ax, keepdims=bool(keepdims))
    dy = rng(79).standard_normal(np.shape(y))
    (dx,) = run_kernel("ReduceMaxGrad", dy, x, y, axes=axes, keepdims=keepdims)
    f = lambda x: np.sum(dy * np.max(x, axis=ax, keepdims=bool(keepdims)))  # noqa: E731
    np.testing.assert_allclose(dx, numeric_grad(f, [x], 0), rtol=1e-7, atol=1e-9)
    # the opset-18 form: axes as an input
    if axes:
        (dx2,) = run_kernel("ReduceMaxGrad", dy, x, y, np.array(axes, np.int64), keepdims=keepdims)
        np.testing.assert_array_equal(dx, dx2)


def test_reducemax_grad_splits_ties_like_torch_amax():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.amax(xt, dim=1)
    dy = np.array([1.0, -2.0], np.float32)
    yt.backward(torch.tensor(dy))
    (dx,) = run_kernel("ReduceMaxGrad", dy, x, yt.detach().numpy(), axes=[1], keepdims=0)
    assert dx.dtype == np.float32
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6)


# ----------------------------------------------------------------------------- Python 3.8

@pytest.mark.skipif(shutil.which("vermin") is None, reason="vermin not installed")
def test_train_kernels_run_on_python_3_8():
    out = subprocess.run(
        ["vermin", "-t=3.8-", "--no-tips", "--violations", os.path.join(ROOT, "pytrain", "ops", "train")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert out.returncode == 0, out.stdout


def test_every_spec_gradient_op_has_a_kernel():
    from pytrain.ops import PYTRAIN_DOMAIN, supported_ops
    spec = {"BatchNormTraining", "SumToShape", "MatMulGrad", "ConvGrad", "MaxPoolGrad", "AveragePoolGrad",
            "GlobalAveragePoolGrad", "BatchNormGrad", "LayerNormalizationGrad", "SoftmaxGrad",
            "LogSoftmaxGrad", "SoftmaxCrossEntropyLossGrad", "ReluGrad", "LeakyReluGrad", "GeluGrad",
            "DropoutGrad", "GatherGrad", "SliceGrad", "ConcatGrad", "SplitGrad", "ReduceGrad",
            "ReduceMaxGrad", "ClipGrad"}
    assert spec <= set(supported_ops(PYTRAIN_DOMAIN))
