"""Depthwise Conv over small maps as one dense operator per channel (pytrain/ops/nn/depthwise.py):
the forward against onnxruntime (ops_oracle) and torch, ConvGrad's dX, dW, dB against torch's
autograd, on odd sizes, uneven pads, strides, dilations, auto_pad, 1-D/2-D/3-D, depthwise
multipliers 2 and 3; and NaN/inf inputs, which this form declines, staying inside their windows."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ops_oracle import check
from pytrain.ops import OpContext, get_kernel
from pytrain.ops.nn import depthwise
from pytrain.ops.nn.op_conv import conv_window
from pytrain.ops.registry import PYTRAIN_DOMAIN

RNG = np.random.default_rng(4)


class _Wants(OpContext):
    def wants(self, i: int) -> bool:
        return True


def _run(op, *inputs, domain="", **attrs):
    return get_kernel(op, domain=domain).fn(_Wants(), *inputs, **attrs)


def _window(X, W, attrs):
    return conv_window(X, W, None, attrs["group"], None, attrs.get("strides"), attrs.get("dilations"),
                       attrs.get("pads"), attrs.get("auto_pad", "NOTSET"))


@pytest.fixture
def dense_everywhere(monkeypatch):
    """Every depthwise Conv below takes the dense form whatever its density."""
    monkeypatch.setattr(depthwise, "_MAX_DENSITY", 1e9)
    monkeypatch.setattr(depthwise, "_MAX_PAIRS", 1 << 20)


def test_real_thresholds_take_mobilenetv3s_late_blocks_only():
    def suits(xs, k, s):
        X, W = np.zeros(xs, np.float32), np.zeros((xs[1], 1, k, k), np.float32)
        return depthwise.suits(_window(X, W, dict(group=xs[1], pads=[k // 2] * 4, strides=[s, s])))

    assert suits((8, 120, 3, 12), 5, 1) and suits((8, 288, 2, 6), 5, 1) and suits((8, 48, 6, 24), 5, 2)
    assert not suits((8, 48, 6, 24), 3, 1) and not suits((8, 40, 12, 48), 3, 2)


CASES = [
    # (X shape, W shape, attributes): MobileNetV3's late blocks, then the corners
    ((3, 7, 3, 12), (7, 1, 5, 5), dict(group=7, pads=[2, 2, 2, 2])),
    ((2, 9, 2, 6), (9, 1, 5, 5), dict(group=9, pads=[2, 2, 2, 2])),
    ((2, 5, 6, 11), (5, 1, 5, 5), dict(group=5, pads=[2, 2, 2, 2], strides=[2, 2])),
    ((2, 5, 5, 7), (5, 1, 3, 3), dict(group=5, pads=[1, 0, 2, 1], strides=[2, 3])),
    ((2, 4, 7, 9), (4, 1, 3, 2), dict(group=4, pads=[2, 1, 0, 2], strides=[1, 2], dilations=[2, 3])),
    ((3, 4, 5, 5), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_UPPER", strides=[2, 2])),
    ((3, 4, 5, 6), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_LOWER", strides=[2, 2])),
    ((1, 3, 3, 3), (3, 1, 3, 3), dict(group=3, pads=[4, 4, 4, 4], strides=[2, 2])),  # more pad than input
    ((2, 3, 4, 5), (6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),  # multiplier 2
    ((2, 2, 5, 4), (6, 1, 3, 2), dict(group=2, pads=[0, 1, 1, 0], strides=[2, 1])),  # multiplier 3
    ((2, 4, 13), (8, 1, 5), dict(group=4, pads=[2, 1], strides=[2])),  # 1-D, multiplier 2
    ((2, 3, 3, 4, 5), (3, 1, 3, 3, 3), dict(group=3, pads=[1, 0, 1, 1, 2, 1])),  # 3-D
    ((2, 1, 4, 6), (4, 1, 3, 3), dict(group=1, pads=[1, 1, 1, 1])),  # one channel, four filters
]


def _torch_conv(X, W, B, attrs):
    xs = X.shape[2:]
    win = conv_window(X, W, B, attrs["group"], None, attrs.get("strides"), attrs.get("dilations"),
                      attrs.get("pads"), attrs.get("auto_pad", "NOTSET"))
    pads = []
    for a in reversed(range(len(xs))):
        pads += [win.pads_begin[a], win.pads_end[a]]
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[len(xs)]
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (X, W, B))
    y = conv(torch.nn.functional.pad(xt, pads), wt, bt, stride=win.strides, dilation=win.dilations,
             groups=attrs["group"])
    return y, (xt, wt, bt)


@pytest.mark.parametrize("xs, ws, attrs", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_depthwise_forward_and_grads_against_torch(dense_everywhere, xs, ws, attrs, dtype):
    X = RNG.standard_normal(xs).astype(dtype)
    W = RNG.standard_normal(ws).astype(dtype)
    B = RNG.standard_normal(ws[0]).astype(dtype)
    assert depthwise.suits(_window(X, W, attrs))
    y, = _run("Conv", X, W, B, **attrs)
    yt, leaves = _torch_conv(X, W, B, attrs)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == dtype and y.shape == tuple(yt.shape) and y.flags.c_contiguous
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=tol, atol=tol)
    dY = RNG.standard_normal(y.shape).astype(dtype)
    yt.backward(torch.tensor(dY))
    got = _run("ConvGrad", dY, X, W, domain=PYTRAIN_DOMAIN, **attrs)
    for g, leaf in zip(got, leaves):
        assert g.dtype == dtype and g.shape == tuple(leaf.shape) and g.flags.c_contiguous
        np.testing.assert_allclose(g, leaf.grad.numpy(), rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("case", [0, 2, 4, 8, 10])
def test_dense_depthwise_against_onnxruntime(dense_everywhere, case):
    xs, ws, attrs = CASES[case]
    X = RNG.standard_normal(xs).astype(np.float32)
    W = RNG.standard_normal(ws).astype(np.float32)
    check("Conv", [X, W], attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_values_stay_in_their_windows(bad):
    # the dense operator's zeros would spread 0 * inf = NaN over the channel: the form declines
    X = RNG.standard_normal((2, 3, 3, 12)).astype(np.float32)
    X[0, 1, 1, 2] = bad
    W = np.abs(RNG.standard_normal((3, 1, 5, 5))).astype(np.float32) + 0.1
    attrs = dict(group=3, pads=[2, 2, 2, 2])
    y, = _run("Conv", X, W, **attrs)
    want = torch.nn.functional.conv2d(torch.tensor(X), torch.tensor(W), padding=2, groups=3).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    assert np.isfinite(y[0, 1, :, 6:]).all() and np.isfinite(y[1]).all()
    dY = np.ones_like(y)
    dY[1, 2, 0, 11] = bad
    dX, dW, _ = _run("ConvGrad", dY, X, W, domain=PYTRAIN_DOMAIN, **attrs)
    assert np.isfinite(dX[0]).all() and np.isfinite(dX[1, 2, :, :9]).all() and not np.isfinite(dX[1, 2, 0, 11])
    assert np.isfinite(dW[0]).all()
