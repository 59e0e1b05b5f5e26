"""softmax.c's float32 kernels of a language model's step (GPT-2 LoRA in the tab, issue 34): Softmax and
SoftmaxCrossEntropyLoss with its gradient on float32 exponentials (expf32.h) against pytrain's numpy kernels, to a
few float32 ulps, on odd sizes (rows whose length is no multiple of the 4 SIMD lanes), in the four builds."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from test_wasm_gemm import _call_kernels, wasm_path  # noqa: F401  (wasm_path is a fixture: four builds)

from pytrain.ops import OpContext, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN


def _case(fn: str, n: int, c: int, extra: list, read: list, bufs: list) -> dict:
    return {"fn": fn, "ret": True, "read": read, "args": ["$0", "$1", n, c] + extra, "buffers": bufs}


def test_float32_cross_entropy_kernels_equal_numpy(wasm_path: Path, tmp_path: Path):
    """pytrain_softmax_ce gives SoftmaxCrossEntropyLoss and its log_prob, pytrain_softmax_ce_grad its
    gradient, as the numpy kernels within a few float32 ulps, over scores from tiny to huge (exponentials
    under float32's normal range count as 0); a NaN or an infinity and a label out of range make them decline
    (2 and 1), a positive log-probability the gradient (2)."""
    loss_fn = get_kernel("SoftmaxCrossEntropyLoss").numpy_fn
    grad_fn = get_kernel("SoftmaxCrossEntropyLossGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(34)
    cases, inputs, expected = [], [], []
    for n, c, scale, reduction in ((37, 1001, 3.0, "mean"), (7, 1000, 30.0, "sum"), (33, 3, 1e-6, "mean"),
                                   (5, 7, 500.0, "mean"), (64, 10, 1.0, "mean")):
        x = (rng.standard_normal((n, c)) * scale).astype(np.float32)
        t = rng.integers(0, c, n).astype(np.int64)
        loss, log_prob = loss_fn(OpContext(output_mask=[True, True]), x, t, reduction=reduction)
        (dx,) = grad_fn(OpContext(), np.asarray(np.float32(0.75)), log_prob, t, reduction=reduction)
        mean = int(reduction == "mean")
        coef = 0.75 / (n if mean else 1)
        rows = [{"len": x.size, "fill": True}, {"len": 2 * n, "fill": True}, {"len": x.size, "fill": False}]
        cases.append(_case("softmax_ce", n, c, ["$2", mean, "$3"], [2, 3],
                           rows + [{"len": 1, "fill": False}]))
        cases.append(_case("softmax_ce_grad", n, c, [coef, "$2"], [2], rows))
        inputs += [x, t.view(np.float32), log_prob, t.view(np.float32)]
        expected.append((log_prob, loss, dx))
    bad = np.zeros((2, 5), np.float32)
    for value, labels, fn in ((np.nan, [0, 1], "softmax_ce"), (np.inf, [0, 1], "softmax_ce"),
                              (-np.inf, [0, 1], "softmax_ce"), (0.0, [0, 5], "softmax_ce"),
                              (np.nan, [0, 1], "softmax_ce_grad"), (0.5, [0, 1], "softmax_ce_grad"),
                              (-1.0, [0, -1], "softmax_ce_grad")):
        x = bad.copy()
        x[1, 4] = value
        extra = [0, 1, "$2"] if fn == "softmax_ce" else [1.0, "$2"]
        cases.append(_case(fn, 2, 5, extra, [], [{"len": 10, "fill": True}, {"len": 4, "fill": True},
                                                      {"len": 10, "fill": False}]))
        inputs += [x, np.asarray(labels, np.int64).view(np.float32)]
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for k, (log_prob, loss, dx) in enumerate(expected):
        got_lp, got_loss, ret, got_dx, ret_grad = got[5 * k: 5 * k + 5]
        assert ret[0] == 0 and ret_grad[0] == 0
        scale = max(1.0, float(np.abs(log_prob).max()))
        np.testing.assert_allclose(got_lp, log_prob.ravel(), rtol=2e-6, atol=2e-6 * scale)
        np.testing.assert_allclose(got_loss[0], loss, rtol=2e-6)
        np.testing.assert_allclose(got_dx, dx.ravel(), rtol=1e-5, atol=1e-7)
    assert [float(r[0]) for r in got[5 * len(expected):]] == [2.0, 2.0, 2.0, 1.0, 2.0, 2.0, 1.0]


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps (on the ordered integer line, so across 0 too)."""
    ia, ib = (np.asarray(v, np.float32).view(np.int32).astype(np.int64) for v in (a, b))
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_float32_tanh_kernel_within_3_ulps(wasm_path: Path, tmp_path: Path):
    """pytrain_tanh (GPT-2's tanh-form GELU in float32): within 3 ulps of the float64 tanh rounded to float32
    across tiny |x|, both sides of its two forms' seam at 0.625, the plateau, an odd length (the scalar tail);
    NaN stays NaN, +-inf give +-1, -0 stays -0; and within 2e-6 of the Tanh numpy kernel (the routing's bound)."""
    tanh = get_kernel("Tanh").numpy_fn
    rng = np.random.default_rng(35)
    x = np.concatenate([np.float32([np.nan, -0.0, 0.0, np.inf, -np.inf, 0.625, -0.625, 0.62499994, 9.01, 1e-30]),
                        rng.uniform(-12, 12, 4001).astype(np.float32), rng.uniform(-1e-3, 1e-3, 501).astype(np.float32),
                        rng.uniform(-0.7, 0.7, 2001).astype(np.float32)])
    got = _call_kernels(wasm_path, tmp_path, [{"fn": "tanh", "buffers": [{"len": x.size, "fill": True},
                                                                               {"len": x.size, "fill": False}],
                                               "read": [1], "args": ["$0", "$1", x.size]}], [x])[0]
    exact = np.tanh(x.astype(np.float64)).astype(np.float32)
    finite = ~np.isnan(x)
    assert _ulps(got[finite], exact[finite]).max() <= 3
    assert np.isnan(got[0]) and np.signbit(got[1]) and got[1] == 0 and got[3] == 1.0 and got[4] == -1.0
    want = tanh(OpContext(), x)[0]
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=2e-6)
