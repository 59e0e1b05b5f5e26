"""An ungrouped 2-D stride-1 Conv with M < C as one product per tap over the flat padded input
(pytrain/ops/nn/conv_taps.py) against torch and onnxruntime (ops_oracle): uneven pads, dilations,
auto_pad, non-square kernels, float32/float64; and a NaN or infinity stays in the windows that read
it (the dropped columns of the padded grid read across rows)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ops_oracle import check
from pytrain.ops import OpContext, get_kernel
from pytrain.ops.nn import conv_taps
from pytrain.ops.nn.op_conv import conv_window

RNG = np.random.default_rng(33)

CASES = [
    ((2, 12, 9, 11), (4, 12, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 9, 13, 10), (6, 9, 3, 3), dict(pads=[2, 0, 1, 1])),
    ((2, 8, 12, 9), (3, 8, 3, 2), dict(pads=[2, 1, 2, 3], dilations=[2, 3])),
    ((2, 6, 11, 12), (2, 6, 5, 5), dict(auto_pad="SAME_UPPER")),
    ((2, 6, 11, 12), (2, 6, 4, 4), dict(auto_pad="SAME_LOWER")),
    ((1, 7, 10, 13), (4, 7, 3, 3), dict(auto_pad="VALID")),
]


def _run(X, W, B, attrs):
    return get_kernel("Conv").fn(OpContext(), *([X, W] + ([B] if B is not None else [])), **attrs)[0]


@pytest.mark.parametrize("xs, ws, attrs", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_taps_against_torch(xs, ws, attrs, dtype):
    X = RNG.standard_normal(xs).astype(dtype)
    W = RNG.standard_normal(ws).astype(dtype)
    B = RNG.standard_normal(ws[0]).astype(dtype)
    win = conv_window(X, W, B, 1, None, None, attrs.get("dilations"), attrs.get("pads"),
                      attrs.get("auto_pad", "NOTSET"))
    assert conv_taps.suits(X, W, win, 1)
    got = _run(X, W, B, attrs)
    pads = [win.pads_begin[1], win.pads_end[1], win.pads_begin[0], win.pads_end[0]]
    want = torch.nn.functional.conv2d(torch.nn.functional.pad(torch.tensor(X), pads), torch.tensor(W),
                                      torch.tensor(B), dilation=win.dilations).numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", [0, 2, 3])
def test_conv_taps_against_onnxruntime(case):
    xs, ws, attrs = CASES[case]
    X = RNG.standard_normal(xs).astype(np.float32)
    W = RNG.standard_normal(ws).astype(np.float32)
    check("Conv", [X, W, RNG.standard_normal(ws[0]).astype(np.float32)], attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_input_stays_in_its_windows(bad):
    X = RNG.standard_normal((1, 6, 10, 10)).astype(np.float32)
    X[0, 2, 4, 9] = bad  # the last column: the grid's dropped columns of the next row read it
    W = np.abs(RNG.standard_normal((2, 6, 3, 3))).astype(np.float32) + 0.1
    got = _run(X, W, None, dict(pads=[1, 1, 1, 1]))
    want = torch.nn.functional.conv2d(torch.tensor(X), torch.tensor(W), padding=1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert not np.isfinite(got[0, :, 3:6, 8:]).any() and np.isfinite(got[0, :, :, :8]).all()
