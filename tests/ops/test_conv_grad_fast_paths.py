"""The native forms of ConvGrad (depthwise 2-D, per-sample products: ops/train/conv_grad_paths.py),
ConvTranspose and ConvTransposeGrad (per-sample products) against the batch-folded im2col kernels
they replace (taken when a product backend is set, as in the browser) and torch's autograd."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pytrain.ops import OpContext, backend, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.ops.train import op_conv_grad

RNG = np.random.default_rng(32)


class _Wants(OpContext):
    def wants(self, i: int) -> bool:
        return True


def _run(op, *inputs, domain="", **attrs):
    return get_kernel(op, domain=domain).fn(_Wants(), *inputs, **attrs)


def _batch_folded(op, *inputs, domain="", **attrs):
    previous = backend.use("matmul", lambda a, b: np.matmul(a, b))
    try:
        return _run(op, *inputs, domain=domain, **attrs)
    finally:
        backend.use("matmul", previous)


@pytest.fixture
def small_thresholds(monkeypatch):
    monkeypatch.setattr(op_conv_grad, "_POINTWISE_MIN_POSITIONS", 1)
    monkeypatch.setattr(op_conv_grad, "_PER_SAMPLE_MIN_POSITIONS", 1)


CONV_CASES = [
    # depthwise: strides, uneven pads, dilations, auto_pad, pads wider than the kernel reaches
    ((2, 5, 11, 13), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1])),
    ((2, 6, 3, 12), (6, 1, 5, 5), dict(group=6, pads=[2, 2, 2, 2])),
    ((2, 5, 17, 15), (5, 1, 3, 3), dict(group=5, pads=[1, 0, 2, 1], strides=[2, 3])),
    ((2, 4, 20, 19), (4, 1, 5, 3), dict(group=4, pads=[2, 1, 0, 2], strides=[2, 2], dilations=[2, 3])),
    ((3, 4, 16, 16), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_UPPER", strides=[3, 3])),
    ((3, 4, 15, 16), (4, 1, 2, 2), dict(group=4, auto_pad="VALID", strides=[2, 1])),
    ((1, 3, 9, 9), (3, 1, 3, 3), dict(group=3, pads=[4, 4, 4, 4], strides=[2, 2])),
    # pointwise and ungrouped per-sample
    ((2, 6, 7, 8), (9, 6, 1, 1), dict()),
    ((2, 6, 7), (9, 6, 1), dict()),
    ((2, 3, 12, 12), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((2, 4, 13, 11), (5, 4, 5, 3), dict(pads=[2, 1, 0, 2], strides=[2, 2], dilations=[2, 1])),
    ((2, 3, 6, 7, 8), (4, 3, 3, 2, 3), dict(auto_pad="SAME_LOWER", strides=[2, 1, 2])),
    # ungrouped, stride 1, fewer output than input channels: dX as a Conv of dY (and pads past the
    # kernel's reach, where col2im stays)
    ((2, 8, 9, 10), (3, 8, 3, 3), dict(pads=[1, 0, 2, 1])),
    ((2, 7, 11, 9), (2, 7, 3, 2), dict(pads=[2, 1, 2, 0], dilations=[2, 3])),
    ((2, 6, 13), (4, 6, 3), dict(auto_pad="SAME_UPPER")),
    ((1, 6, 5, 6, 7), (2, 6, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),
    ((2, 6, 6, 6), (3, 6, 3, 3), dict(pads=[3, 3, 3, 3])),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_grad_native_forms_against_batch_folded(small_thresholds, xs, ws, attrs, dtype):
    X = RNG.standard_normal(xs).astype(dtype)
    W = RNG.standard_normal(ws).astype(dtype)
    dY = RNG.standard_normal(_run("Conv", X, W, **attrs)[0].shape).astype(dtype)
    assert op_conv_grad._native_form(X, W, _window(X, W, attrs), attrs.get("group", 1)) is not None
    got = _run("ConvGrad", dY, X, W, domain=PYTRAIN_DOMAIN, **attrs)
    want = _batch_folded("ConvGrad", dY, X, W, domain=PYTRAIN_DOMAIN, **attrs)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape and g.flags.c_contiguous
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _window(X, W, attrs):
    from pytrain.ops.nn.op_conv import conv_window

    return conv_window(X, W, None, attrs.get("group", 1), None, attrs.get("strides"), attrs.get("dilations"),
                       attrs.get("pads"), attrs.get("auto_pad", "NOTSET"))


def test_depthwise_grad_matches_torch():
    x = RNG.standard_normal((4, 8, 12, 48)).astype(np.float32)
    w = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wt, stride=2, padding=1, groups=8)
    dy = RNG.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    dx, dw, db = _run("ConvGrad", dy, x, w, domain=PYTRAIN_DOMAIN, group=8, strides=[2, 2], pads=[1, 1, 1, 1])
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, wt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs, ws", [((3, 5, 1, 1), (4, 5, 1, 1)), ((2, 6, 2, 3), (9, 6, 1, 1)),
                                    ((1, 7, 3), (2, 7, 1)), ((4, 3, 1, 1, 1), (5, 3, 1, 1, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pointwise_grad_over_few_positions(xs, ws, dtype):
    X = RNG.standard_normal(xs).astype(dtype)
    W = RNG.standard_normal(ws).astype(dtype)
    dY = RNG.standard_normal(_run("Conv", X, W)[0].shape).astype(dtype)
    assert op_conv_grad._native_form(X, W, _window(X, W, {}), 1) is op_conv_grad.pointwise_folded_grad
    got = _run("ConvGrad", dY, X, W, domain=PYTRAIN_DOMAIN)
    want = _batch_folded("ConvGrad", dY, X, W, domain=PYTRAIN_DOMAIN)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    xt, wt = torch.tensor(X, requires_grad=True), torch.tensor(W, requires_grad=True)
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}[X.ndim]
    conv(xt, wt).backward(torch.tensor(dY))
    np.testing.assert_allclose(got[0], xt.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1], wt.grad.numpy(), rtol=tol, atol=tol)


TRANSPOSE_CASES = [
    ((2, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2])),  # DBNet's upsampling: no overlap
    ((2, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((1, 3, 4, 5), (3, 2, 3, 2), dict(strides=[1, 2], dilations=[2, 1], pads=[0, 1, 2, 0])),
    ((2, 3, 7), (3, 4, 4), dict(strides=[3], output_shape=[22])),
]


@pytest.mark.parametrize("xs, ws, attrs", TRANSPOSE_CASES, ids=[str(i) for i in range(len(TRANSPOSE_CASES))])
def test_conv_transpose_native_against_batch_folded_and_torch(xs, ws, attrs):
    X = RNG.standard_normal(xs).astype(np.float32)
    W = RNG.standard_normal(ws).astype(np.float32)
    B = RNG.standard_normal(ws[1]).astype(np.float32)
    y = _run("ConvTranspose", X, W, B, **attrs)[0]
    np.testing.assert_allclose(y, _batch_folded("ConvTranspose", X, W, B, **attrs)[0], rtol=1e-5, atol=1e-5)
    dY = RNG.standard_normal(y.shape).astype(np.float32)
    got = _run("ConvTransposeGrad", dY, X, W, domain=PYTRAIN_DOMAIN, **attrs)
    want = _batch_folded("ConvTransposeGrad", dY, X, W, domain=PYTRAIN_DOMAIN, **attrs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    if "output_shape" not in attrs:
        conv_t = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d}[len(xs) - 2]
        pads = attrs.get("pads", [0] * (2 * (len(xs) - 2)))
        if pads[:len(pads) // 2] == pads[len(pads) // 2:]:
            ref = conv_t(torch.tensor(X), torch.tensor(W), torch.tensor(B), stride=attrs["strides"],
                         padding=pads[:len(pads) // 2], output_padding=attrs.get("output_padding", 0),
                         dilation=attrs.get("dilations", 1))
            np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-4)
