"""web/kernels/gelu.c's Gelu and GeluGrad (the training model's fused GELU, pytrain.autodiff.gelu_forms) run in
Node.js through kernels.js, driven by the browser's own routing (pytrain/ops/wasm/gelu.py) against the numpy
kernels they stand in for and a float64 reference: the erf form (double precision, rounded once) within one
float32 ulp of the reference, the tanh form (float32, as 1 / (1 + e^-2u) on expf32.h's exp) within a few float32
ulps of the numpy kernels; odd lengths (the scalar tail), activations past the two-lane ranges, NaN and
infinities. Same harness as tests/web/test_wasm_gemm.py (the committed builds and a fresh one)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from test_wasm_gemm import _call_kernels, wasm_path  # noqa: F401  (wasm_path is a fixture)

import pytrain.ops.wasm as wasm
from pytrain.ops import OpContext, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN
from pytrain.ops.wasm import gelu


class _NodeKernels:
    """pytrain.ops.wasm's ``kernels`` and ``ptr`` for gelu.py, in Node: a pointer is an index into the arrays
    handed over; a call (inputs..., output, n) runs the kernel on copies and writes its output back."""

    def __init__(self, wasm_file, tmp) -> None:
        self.wasm, self.tmp, self.arrays, self.calls = wasm_file, tmp, [], []

    def ptr(self, a: np.ndarray) -> int:
        assert a.dtype == np.float32 and a.flags.c_contiguous
        self.arrays.append(a)
        return len(self.arrays) - 1

    def __getattr__(self, name: str):
        if not name.startswith("gelu_") or name.endswith("_threads"):
            raise AttributeError(name)

        def call(*args):
            ins = [self.arrays[p] for p in args[:-2]]
            out, n = self.arrays[args[-2]], args[-1]
            bufs = [{"len": a.size, "fill": True} for a in ins] + [{"len": out.size, "fill": False}]
            case = {"fn": name, "buffers": bufs, "read": [len(ins)],
                    "args": ["$%d" % i for i in range(len(ins) + 1)] + [n]}
            out.ravel()[...] = _call_kernels(self.wasm, self.tmp, [case], ins)[0]
            self.calls.append(name)
        return call


@pytest.fixture
def node_kernels(wasm_path, tmp_path, monkeypatch):
    k = _NodeKernels(wasm_path, tmp_path)
    monkeypatch.setattr(wasm, "kernels", k)   # threaded() reads it
    monkeypatch.setattr(gelu, "ptr", k.ptr)
    return k


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps (on the ordered integer line, so across 0 too)."""
    ia, ib = (np.asarray(v, np.float32).view(np.int32).astype(np.int64) for v in (a, b))
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def _inputs(rng) -> np.ndarray:
    """4099 activations (an odd length): GELU's usual range, past erf's two-lane range (|x| > 2 sqrt 2) and
    exp's, tiny ones, the tanh form's plateau, NaN and infinities."""
    special = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.8284271, -2.8284271, 40.0, -40.0, 1e-30])
    return np.concatenate([special, rng.standard_normal(3000).astype(np.float32) * 2,
                           rng.uniform(-12, 12, 1000).astype(np.float32),
                           rng.uniform(-1e-3, 1e-3, 89).astype(np.float32)])


def _exact(x: np.ndarray, dy: np.ndarray):
    """float64 GELU (erf form) and dy * its derivative."""
    xd = x.astype(np.float64)
    erf = np.array([math.erf(v / math.sqrt(2.0)) if np.isfinite(v) else np.sign(v) for v in xd])
    cdf = 0.5 * (1.0 + erf)
    with np.errstate(invalid="ignore", over="ignore"):
        pdf = np.exp(-0.5 * xd * xd) / math.sqrt(2.0 * math.pi)
        return xd * cdf, dy.astype(np.float64) * (cdf + xd * pdf)


def test_erf_form_within_one_ulp_of_float64(node_kernels):
    rng = np.random.default_rng(341)
    x = _inputs(rng)
    dy = rng.standard_normal(x.size).astype(np.float32)
    (y,) = gelu.gelu(OpContext(), x)
    (dx,) = gelu.gelu_grad(OpContext(), dy, x)
    (y_ort,) = gelu.gelu(OpContext(), x)   # onnxruntime's com.microsoft Gelu: the erf form, no attribute
    assert node_kernels.calls == ["gelu_erf", "gelu_erf_grad", "gelu_erf"]
    want_y, want_dx = _exact(x, dy)
    finite = np.isfinite(x)
    assert _ulps(y[finite], want_y[finite].astype(np.float32)).max() <= 1
    assert _ulps(dx[finite], want_dx[finite].astype(np.float32)).max() <= 1
    np.testing.assert_array_equal(y, y_ort)
    with np.errstate(invalid="ignore"):   # -inf * 0
        numpy_y = get_kernel("Gelu").numpy_fn(OpContext(), x)[0]
        numpy_dx = get_kernel("GeluGrad", PYTRAIN_DOMAIN).numpy_fn(OpContext(), dy, x)[0]
    np.testing.assert_array_equal(y[~finite], numpy_y[~finite])   # NaN, inf, and -inf * 0: NaN as numpy's
    np.testing.assert_array_equal(dx[~finite], numpy_dx[~finite])
    # the numpy kernels round 1 + erf to float32 (cancellation below -2): y within x/2 times an ulp of 1 of them
    ax = np.abs(x[finite]).astype(np.float64)
    assert np.all(np.abs(y[finite] - numpy_y[finite]) <= 1e-6 * np.abs(numpy_y[finite]) + 2e-7 * ax)
    assert np.all(np.abs(dx[finite] - numpy_dx[finite])
                  <= 1e-6 * np.abs(numpy_dx[finite]) + 2e-7 * (1 + ax) * np.abs(dy[finite]))


def test_tanh_form_within_a_few_ulps_of_the_numpy_kernels(node_kernels):
    rng = np.random.default_rng(342)
    x = _inputs(rng)
    dy = rng.standard_normal(x.size).astype(np.float32)
    (y,) = gelu.gelu(OpContext(), x, approximate="tanh")
    (dx,) = gelu.gelu_grad(OpContext(), dy, x, approximate=b"tanh")
    assert node_kernels.calls == ["gelu_tanh", "gelu_tanh_grad"]
    with np.errstate(invalid="ignore"):
        want_y = get_kernel("Gelu").numpy_fn(OpContext(), x, approximate="tanh")[0]
        want_dx = get_kernel("GeluGrad", PYTRAIN_DOMAIN).numpy_fn(OpContext(), dy, x, approximate="tanh")[0]
    finite = np.isfinite(x)
    ax = np.abs(x[finite]).astype(np.float64)
    # the numpy kernels round 1 + tanh(u) and 1 - t^2 (an ulp of 1): y moves by x/2 times that, the slope by
    # (1/2 + |x| (1 + x^2)) times it
    assert np.all(np.abs(y[finite] - want_y[finite]) <= 1e-6 * np.abs(want_y[finite]) + 2e-7 * ax)
    assert np.all(np.abs(dx[finite] - want_dx[finite])
                  <= 1e-6 * np.abs(want_dx[finite]) + 2e-7 * (1 + ax * (1 + ax * ax)) * np.abs(dy[finite]))
    np.testing.assert_array_equal(y[~finite], want_y[~finite])
    np.testing.assert_array_equal(dx[~finite], want_dx[~finite])


def test_what_the_routing_declines(node_kernels):
    """Small tensors, other dtypes, shapes that differ and an unknown form go to the numpy kernels (which
    name the bad form)."""
    x = np.ones(4096, np.float32)
    assert gelu.gelu(OpContext(), x[:100]) is None
    assert gelu.gelu(OpContext(), x.astype(np.float64)) is None
    assert gelu.gelu(OpContext(), x, approximate="fast") is None
    assert gelu.gelu_grad(OpContext(), x[:2048], x) is None
    assert gelu.gelu(OpContext(), x.reshape(64, 64)[:, ::2]) is None
    assert node_kernels.calls == []
