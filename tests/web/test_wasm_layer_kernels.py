"""web/kernels/elementwise.c's Clip, batchnorm.c, conv.c (depthwise and pointwise Conv) and
exp_erf.c (Exp, Erf, Tanh) run in Node.js through kernels.js against the numpy kernels they stand in for in
the browser.

Same harness as tests/web/test_wasm_gemm.py (the committed kernels.wasm and a fresh build)."""
from __future__ import annotations

import numpy as np
import pytest

from test_wasm_gemm import _call_kernels, wasm_path  # noqa: F401  (wasm_path is a fixture)

from pytrain.ops import OpContext, get_kernel
from pytrain.ops.registry import PYTRAIN_DOMAIN


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (NaN == NaN, inf == inf count as 0)."""
    a = np.asarray(a, np.float32).ravel()
    b = np.asarray(b, np.float32).ravel()
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    # map to a monotonic integer line
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.where(same, 0, np.abs(ia - ib))


def _unary_case(fn: str, n: int) -> dict:
    return {"fn": fn, "buffers": [{"len": n, "fill": True}, {"len": n, "fill": False}],
            "read": [1], "args": ["$0", "$1", n]}


def _num(v) -> object:
    """A float argument for calls.json: JSON has no NaN/inf, so those go as JS Number() strings."""
    if v is None or np.isfinite(v):
        return v
    return "NaN" if np.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


@pytest.fixture(autouse=True)
def _numbers_in_args(monkeypatch):
    """test_wasm_gemm' driver, with string arguments other than "$i" read as JS numbers."""
    import test_wasm_gemm

    old = 'const resolve = (a) => (typeof a === "string" ? ptrs[Number(a.slice(1))] : a);'
    assert old in test_wasm_gemm.CALL_DRIVER
    monkeypatch.setattr(test_wasm_gemm, "CALL_DRIVER", test_wasm_gemm.CALL_DRIVER.replace(
        old, 'const resolve = (a) => (typeof a !== "string" ? a : a[0] === "$" ? ptrs[Number(a.slice(1))] '
             ': Number(a));'))


def test_clip_kernel_equals_numpy_bit_for_bit(wasm_path, tmp_path):
    """ReLU6 and one-sided bounds, NaN/inf/-0.0 in the input, a NaN bound (all NaN) and min > max
    (all max): the numpy kernel's bits, SIMD body and tail."""
    clip = get_kernel("Clip").numpy_fn
    rng = np.random.default_rng(11)
    n = 1027
    x = (rng.standard_normal(n) * 5).astype(np.float32)
    x[:7] = [np.nan, -0.0, 0.0, np.inf, -np.inf, 6.0, -2.0]
    bounds = [(0.0, 6.0), (None, 1.5), (-2.0, None), (3.0, -1.0), (np.nan, 1.0), (0.0, np.nan), (None, None)]
    cases, expected = [], []
    for lo, hi in bounds:
        mn = None if lo is None else np.array(lo, np.float32)
        mx = None if hi is None else np.array(hi, np.float32)
        expected.append(clip(OpContext(), x, mn, mx)[0])
        case = _unary_case("clip", n)
        case["args"] += [_num(-np.inf if lo is None else lo), _num(np.inf if hi is None else hi)]
        cases.append(case)
    got = _call_kernels(wasm_path, tmp_path, cases, [x] * len(cases))
    for g, w in zip(got, expected):
        # NaN payloads are not part of the contract, nor a zero's sign (np.clip keeps -0.0 where
        # maximum(-0.0, 0.0) gives 0.0, and numpy versions differ): everything else to the bit
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan)
        np.testing.assert_array_equal((g[~nan] + np.float32(0)).view(np.int32),
                                      (w[~nan] + np.float32(0)).view(np.int32))


def _batchnorm_case(rng, shape):
    n, c = shape[:2]
    x = rng.standard_normal(shape).astype(np.float32)
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean = rng.standard_normal(c).astype(np.float32)
    var = rng.uniform(0.1, 2.0, c).astype(np.float32)
    return x, scale, bias, mean, var


def test_channel_affine_equals_inference_batchnorm_bit_for_bit(wasm_path, tmp_path):
    """pytrain_channel_affine with pytrain.ops.wasm.normalization.batch_normalization's a, b gives
    the numpy BatchNormalization kernel's inference output to the bit (spatial sizes with and
    without a tail)."""
    bn = get_kernel("BatchNormalization").numpy_fn
    rng = np.random.default_rng(12)
    cases, inputs, expected = [], [], []
    for shape in ((3, 5, 7, 9), (2, 16, 4, 4), (4, 3, 1, 1), (2, 6, 10)):
        x, scale, bias, mean, var = _batchnorm_case(rng, shape)
        eps = 1e-3
        expected.append(bn(OpContext(), x, scale, bias, mean, var, epsilon=eps)[0])
        # the accelerator's formula (pytrain/ops/wasm/normalization.py batch_normalization)
        a = np.ascontiguousarray(scale / np.sqrt(var + np.float32(eps)), dtype=np.float32)
        b = np.ascontiguousarray(bias - mean * a, dtype=np.float32)
        n, c = shape[:2]
        s = x.size // (n * c)
        cases.append({"fn": "channel_affine",
                      "buffers": [{"len": x.size, "fill": True}, {"len": x.size, "fill": False},
                                  {"len": c, "fill": True}, {"len": c, "fill": True}],
                      "read": [1], "args": ["$0", "$1", "$2", "$3", n, c, s]})
        inputs += [x, a, b]
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, w in zip(got, expected):
        assert g.tobytes() == np.ascontiguousarray(w).tobytes()


def _conv_geometry(x_shape, w_shape, strides, pads, dilations):
    from pytrain.ops.windows import geometry

    return geometry("Conv", x_shape, w_shape[2:], strides, dilations, pads, "NOTSET")


# (X shape, channel multiplier, kernel, strides, pads [b, b, e, e], dilations, bias)
DEPTHWISE = [
    ((2, 6, 11, 13), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),   # MobileNet, stride 1
    ((2, 6, 12, 12), 1, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1), False),  # stride 2, asymmetric pads
    ((1, 4, 9, 10), 2, (3, 2), (1, 2), (2, 0, 1, 1), (2, 1), True),    # multiplier 2, dilation
    ((3, 5, 4, 4), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True),     # kernel larger than the input
    ((1, 3, 7, 37), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),   # 8-wide SIMD blocks + 4-wide + tail
    ((1, 3, 9, 41), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),    # stride 2: shuffled loads + tail
    ((1, 2, 9, 30), 1, (3, 3), (2, 2), (0, 0, 0, 0), (2, 1), True),    # stride 2, row dilation
    ((1, 2, 6, 20), 1, (3, 3), (1, 1), (1, 1, 1, 1), (2, 1), True),    # stride 1, row dilation
]


#: MobileNetV3's late depthwise layers (5x5 over 2x6 and 3x12 planes, stride 1 and 2) at odd sizes: N not a
#: multiple of 4 (lanes past N), a channel multiplier, a dilation, asymmetric pads, a kernel past the input
DEPTHWISE_LANES = [
    ((5, 7, 2, 6), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((3, 6, 3, 13), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((6, 3, 3, 12), 2, (5, 5), (1, 1), (2, 1, 1, 2), (1, 1)),
    ((2, 4, 7, 9), 1, (3, 3), (2, 1), (0, 1, 2, 0), (1, 2)),
    ((4, 2, 2, 3), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
]


@pytest.mark.parametrize("lanes", [False, True])
def test_depthwise_conv2d_equals_the_numpy_conv(wasm_path, tmp_path, lanes):
    """pytrain_depthwise_conv2d gives the numpy Conv kernel's output (group == C) for strides,
    asymmetric pads, dilations, a channel multiplier, with and without bias: float32 sums of the
    same terms in the same order (numpy's BLAS may order them differently natively, hence 1e-6); by the
    row walk and with the images as SIMD lanes over padded planes (its output and scratch starting as NaN)."""
    from pytrain.ops.wasm.conv import depthwise_lanes_scratch

    conv = get_kernel("Conv").numpy_fn
    rng = np.random.default_rng(13)
    cases, inputs, expected = [], [], []
    for i, (xs, mult, k, st, pads, dil, *bias) in enumerate(DEPTHWISE + DEPTHWISE_LANES):
        has_bias = bias[0] if bias else i % 2 == 0
        n, c, h, w = xs
        m = c * mult
        x = rng.standard_normal(xs).astype(np.float32)
        wt = rng.standard_normal((m, 1) + k).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32) if has_bias else None
        y = conv(OpContext(), x, wt, b, group=c, strides=list(st), pads=list(pads), dilations=list(dil))[0]
        win = _conv_geometry(xs, wt.shape, st, pads, dil)
        assert y.shape == (n, m) + tuple(win.out_shape)
        bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}]
        inputs += [x, wt]
        if has_bias:
            bufs.append({"len": m, "fill": True})
            inputs.append(b)
        out = len(bufs)
        bufs.append({"len": y.size, "fill": lanes})
        oh, ow = win.out_shape
        args = ["$0", "$1", "$2" if has_bias else 0, "$%d" % out, n, c, mult, h, w, k[0], k[1], oh, ow, st[0],
                st[1], dil[0], dil[1], pads[0], pads[1], 0]
        if lanes:
            size = depthwise_lanes_scratch(n, win, 1)
            bufs.append({"len": size, "fill": True})
            inputs += [np.full(y.size, np.nan, np.float32), np.full(size, np.nan, np.float32)]
            args[-1] = "$%d" % (out + 1)
        cases.append({"fn": "depthwise_conv2d", "buffers": bufs, "read": [out], "args": args})
        expected.append((y, x, wt, b, c, st, pads, dil))
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, (y, x, wt, b, c, st, pads, dil) in zip(got, expected):
        # error bound: float32 rounding of the sum of |terms|
        mag = conv(OpContext(), np.abs(x), np.abs(wt), None if b is None else np.abs(b), group=c,
                   strides=list(st), pads=list(pads), dilations=list(dil))[0]
        assert np.all(np.abs(g - y.ravel()) <= 1e-6 * (mag.ravel() + 1e-30)), np.max(np.abs(g - y.ravel()))


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_conv1x1_equals_the_numpy_conv(wasm_path, tmp_path, bias, batched):
    """pytrain_conv1x1 (one sgemm per image, or with scratch one sgemm of the images side by side;
    then the bias) gives the numpy pointwise Conv's output."""
    conv = get_kernel("Conv").numpy_fn
    rng = np.random.default_rng(14)
    cases, inputs, expected = [], [], []
    for xs, m in (((2, 16, 9, 10), 24), ((3, 40, 6, 6), 8), ((1, 3, 17, 1), 5)):
        n, c, h, w = xs
        x = rng.standard_normal(xs).astype(np.float32)
        wt = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32) if bias else None
        y = conv(OpContext(), x, wt, b)[0]
        mag = conv(OpContext(), np.abs(x), np.abs(wt), None if b is None else np.abs(b))[0]
        bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}]
        inputs += [x, wt]
        if bias:
            bufs.append({"len": m, "fill": True})
            inputs.append(b)
        bufs.append({"len": y.size, "fill": False})
        out = len(bufs) - 1
        if batched:
            bufs.append({"len": (c + m) * n * h * w, "fill": False})
        cases.append({"fn": "conv1x1", "buffers": bufs, "read": [out],
                      "args": ["$0", "$1", "$2" if bias else 0, "$%d" % out, n, c, m, h * w,
                               "$%d" % (out + 1) if batched else 0]})
        expected.append((y, mag))
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, (y, mag) in zip(got, expected):
        assert np.all(np.abs(g - y.ravel()) <= 1e-6 * (mag.ravel() + 1e-30)), np.max(np.abs(g - y.ravel()))


def _special_values(rng, n, lo, hi):
    x = rng.uniform(lo, hi, n).astype(np.float32)
    x[:8] = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-30, -1e-30, 1e-45]
    return x


def test_exp_kernel_equals_numpy_to_float32_rounding(wasm_path, tmp_path):
    """pytrain_exp: np.exp in float32 over the whole range (underflow to subnormals and 0, overflow
    to inf, NaN and infinities): float64 exp rounded to float32 (what a correctly rounded expf
    gives, as Pyodide's libm does) but for rare double-rounding ties."""
    exp = get_kernel("Exp").numpy_fn
    rng = np.random.default_rng(15)
    x = np.concatenate([_special_values(rng, 4001, -110, 90), rng.uniform(-1, 1, 1000).astype(np.float32),
                        np.float32([88.72, 88.73, -87.5, -103.9, -104.0, -200.0])])
    got = _call_kernels(wasm_path, tmp_path, [_unary_case("exp", x.size)], [x])[0]
    want = exp(OpContext(), x)[0]
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64)).astype(np.float32)
    assert np.mean(_ulps(got, exact) == 0) > 0.999
    assert _ulps(got, exact).max() <= 1
    # numpy's own float32 exp may be a SIMD approximation (natively up to a few ulp off): the
    # kernel is never farther from it than numpy is from the rounded truth, plus one ulp
    assert np.all(_ulps(got, want) <= _ulps(want, exact) + 1)
    assert np.isnan(got[0]) and got[3] == np.inf and got[4] == 0.0


def test_erf_kernel_equals_the_numpy_erf_to_float32_rounding(wasm_path, tmp_path):
    """pytrain_erf evaluates pytrain.ops.special.erf's double-precision polynomials: that erf
    rounded to float32 for all but rare double-rounding ties, never more than 1 ulp off, across
    both polynomial ranges, the |x| > 6 plateau, NaN and infinities; and within the Erf kernel's
    own error bound of its result."""
    from pytrain.ops.special import erf as erf64

    erf = get_kernel("Erf").numpy_fn
    rng = np.random.default_rng(16)
    x = np.concatenate([_special_values(rng, 6001, -7, 7), np.float32([2.0, -2.0, 6.0, -6.0, 2.0000002, 5.999])])
    got = _call_kernels(wasm_path, tmp_path, [_unary_case("erf", x.size)], [x])[0]
    # the double-precision erf rounded once to float32
    exact = erf64(x.astype(np.float64)).astype(np.float32)
    assert _ulps(got, exact).max() <= 1
    assert np.mean(_ulps(got, exact) == 0) > 0.999
    # the numpy kernel may take a cheaper float32 path (within 6e-8 of erf): no farther than that
    want = erf(OpContext(), x)[0]
    ok = np.isnan(want) | (np.abs(got.astype(np.float64) - want) <= 6e-8 + 6e-8)
    assert ok.all()
    assert np.isnan(got[0]) and got[3] == 1.0 and got[4] == -1.0


def test_sgemm_batched_equals_numpy_matmul(wasm_path, tmp_path):
    """pytrain_sgemm_batched: a stack of products, operands transposed or not and spaced by any
    stride (attention's heads and their gradients), each equal to np.matmul to float32 rounding."""
    rng = np.random.default_rng(17)
    cases, inputs, expected = [], [], []
    for count, ta, tb, m, n, k, pad in ((4, 0, 0, 32, 32, 64, 0), (3, 0, 1, 17, 9, 33, 5), (2, 1, 0, 8, 40, 7, 3),
                                        (5, 1, 1, 6, 5, 12, 0)):
        ar, ac = (k, m) if ta else (m, k)
        br, bc = (n, k) if tb else (k, n)
        a = rng.standard_normal((count, ar * ac + pad)).astype(np.float32)
        b = rng.standard_normal((count, br * bc + pad)).astype(np.float32)
        am = a[:, :ar * ac].reshape(count, ar, ac)
        bm = b[:, :br * bc].reshape(count, br, bc)
        opa = np.swapaxes(am, 1, 2) if ta else am
        opb = np.swapaxes(bm, 1, 2) if tb else bm
        want = np.matmul(opa.astype(np.float64), opb.astype(np.float64))
        mag = np.matmul(np.abs(opa).astype(np.float64), np.abs(opb).astype(np.float64))
        cases.append({"fn": "sgemm_batched",
                      "buffers": [{"len": a.size, "fill": True}, {"len": b.size, "fill": True},
                                  {"len": count * m * n, "fill": False}],
                      "read": [2], "args": [count, ta, tb, m, n, k, "$0", ar * ac + pad, ac,
                                            "$1", br * bc + pad, bc, "$2", m * n, n]})
        inputs += [a, b]
        expected.append((want, mag))
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, (want, mag) in zip(got, expected):
        assert np.all(np.abs(g - want.ravel()) <= 1e-6 * (mag.ravel() + 1e-30))


def _close(got: np.ndarray, want: np.ndarray, mag: np.ndarray, rel: float = 2e-6) -> None:
    """Equal to float32 rounding: |got - want| within a few float32 ulps of the terms' magnitude."""
    got, want, mag = (np.asarray(v, np.float64).ravel() for v in (got, want, mag))
    assert np.all(np.abs(got - want) <= rel * (np.abs(mag) + np.abs(want)) + 1e-30), np.max(np.abs(got - want))


# (X shape, axis): BERT's (batch, tokens, hidden) and the emb workload's rows, a 2-axis tail
LAYERNORM = [((4, 32, 128), -1), ((64, 32, 64), 2), ((3, 5, 6, 7), 2), ((7, 1), -1)]


def test_layernorm_kernels_equal_numpy(wasm_path, tmp_path):
    """pytrain_layernorm gives LayerNormalization's Y, Mean and InvStdDev, pytrain_layernorm_grad
    LayerNormalizationGrad's dX, dScale and dB, to float32 rounding (statistics summed in double)."""
    from pytrain.ops.registry import PYTRAIN_DOMAIN

    ln = get_kernel("LayerNormalization").numpy_fn
    ln_grad = get_kernel("LayerNormalizationGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(18)
    cases, inputs, expected = [], [], []
    for shape, axis in LAYERNORM:
        a = axis % len(shape)
        tail = shape[a:]
        rows, n = int(np.prod(shape[:a])), int(np.prod(tail))
        x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
        scale = rng.standard_normal(tail).astype(np.float32)
        bias = rng.standard_normal(tail).astype(np.float32)
        dy = rng.standard_normal(shape).astype(np.float32)
        all3 = OpContext(output_mask=(True, True, True))
        y, mean, inv_std = ln(all3, x, scale, bias, axis=axis, epsilon=1e-12)
        dx, dscale, dbias = ln_grad(all3, dy, x, scale, mean, inv_std, axis=axis)
        cases.append({"fn": "layernorm",
                      "buffers": [{"len": x.size, "fill": True}, {"len": n, "fill": True}, {"len": n, "fill": True},
                                  {"len": x.size, "fill": False}, {"len": rows, "fill": False},
                                  {"len": rows, "fill": False}],
                      "read": [3, 4, 5],
                      "args": ["$0", "$1", "$2", "$3", "$4", "$5", rows, n, float(np.float32(1e-12))]})
        inputs += [x, scale, bias]
        cases.append({"fn": "layernorm_grad",
                      "buffers": [{"len": x.size, "fill": True}, {"len": x.size, "fill": True},
                                  {"len": n, "fill": True}, {"len": rows, "fill": True}, {"len": rows, "fill": True},
                                  {"len": x.size, "fill": False}, {"len": n, "fill": False},
                                  {"len": n, "fill": False}],
                      "read": [5, 6, 7], "args": ["$0", "$1", "$2", "$3", "$4", "$5", "$6", "$7", rows, n]})
        inputs += [dy, x, scale, mean, inv_std]
        xhat = (x - mean) * inv_std
        g = dy * scale
        expected.append([(y, np.abs(xhat * scale) + np.abs(bias)), (mean, np.abs(x).mean(axis=tuple(range(a, x.ndim)),
                                                                                         keepdims=True)),
                         (inv_std, inv_std)])
        gmag = np.abs(g).mean(axis=tuple(range(a, x.ndim)), keepdims=True)
        expected.append([(dx, inv_std * (np.abs(g) + gmag + np.abs(xhat) * (np.abs(g * xhat)).mean(
                             axis=tuple(range(a, x.ndim)), keepdims=True)) * 4),
                         (dscale, np.abs(dy * xhat).reshape(rows, n).sum(0).reshape(tail)),
                         (dbias, np.abs(dy).reshape(rows, n).sum(0).reshape(tail))])
    got = iter(_call_kernels(wasm_path, tmp_path, cases, inputs))
    for outs in expected:
        for want, mag in outs:
            _close(next(got), want, np.broadcast_to(mag, want.shape))


def test_softmax_kernel_equals_numpy(wasm_path, tmp_path):
    """pytrain_softmax: the Softmax kernel over the last axis (attention rows of 32, long rows,
    one-element rows, scores from tiny to huge) to float32 rounding; a NaN or an infinity makes it
    decline (return 1)."""
    sm = get_kernel("Softmax").numpy_fn
    rng = np.random.default_rng(19)
    cases, inputs, expected = [], [], []
    for shape, scale in (((4, 2, 32, 32), 3.0), ((3, 1000), 30.0), ((5, 1), 1.0), ((6, 7), 1e4)):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        cases.append({"fn": "softmax", "buffers": [{"len": x.size, "fill": True}, {"len": x.size, "fill": False}],
                      "read": [1], "ret": True, "args": ["$0", "$1", x.size // shape[-1], shape[-1]]})
        inputs.append(x)
        expected.append(sm(OpContext(), x)[0])
    for bad in (np.nan, np.inf, -np.inf):
        x = rng.standard_normal((3, 8)).astype(np.float32)
        x[1, 3] = bad
        cases.append({"fn": "softmax", "buffers": [{"len": x.size, "fill": True}, {"len": x.size, "fill": False}],
                      "read": [], "ret": True, "args": ["$0", "$1", 3, 8]})
        inputs.append(x)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for i, want in enumerate(expected):
        y, ret = got[2 * i], got[2 * i + 1]
        assert ret[0] == 0
        _close(y, want, want)
    assert [float(r[0]) for r in got[2 * len(expected):]] == [1.0, 1.0, 1.0]


def _int64_words(idx: np.ndarray) -> list:
    """int64 values as the driver's int32 words (little-endian pairs)."""
    return np.ascontiguousarray(idx, dtype=np.int64).ravel().view(np.int32).tolist()


def test_gather_grad_kernel_equals_numpy_bit_for_bit(wasm_path, tmp_path):
    """pytrain_gather_grad: GatherGrad along axis 0 (repeated and negative indices, rows never
    gathered) to the bit, the sums in double in index order as the numpy kernel's bincount; an
    index out of range makes it decline (return 1) before writing anything."""
    from pytrain.ops.registry import PYTRAIN_DOMAIN

    gg = get_kernel("GatherGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(20)
    cases, inputs, expected = [], [], []
    for rows, idx_shape, inner in ((1000, (8, 32), (64,)), (50, (4, 16), (3, 5)), (7, (9,), ())):
        idx = rng.integers(-rows, rows, idx_shape).astype(np.int64)
        idx.ravel()[:3] = idx.ravel()[0]  # repeats
        x = np.zeros((rows,) + inner, np.float32)
        dy = (rng.standard_normal(idx_shape + inner) * 1e3).astype(np.float32)
        want = gg(OpContext(), dy, idx, x)[0]
        k = int(np.prod(inner))
        cases.append({"fn": "gather_grad",
                      "buffers": [{"len": dy.size, "fill": True}, {"len": 2 * idx.size, "ints": _int64_words(idx)},
                                  {"len": want.size, "fill": False}, {"len": 2 * rows * k, "fill": False},
                                  {"len": rows, "fill": False}],
                      "read": [2], "ret": True, "args": ["$0", "$1", idx.size, "$2", "$3", "$4", rows, k]})
        inputs.append(dy)
        expected.append(want)
    bad = np.array([0, 3, 7], np.int64)
    cases.append({"fn": "gather_grad",
                  "buffers": [{"len": 6, "fill": True}, {"len": 6, "ints": _int64_words(bad)},
                              {"len": 14, "fill": False}, {"len": 28, "fill": False}, {"len": 7, "fill": False}],
                  "read": [2], "ret": True, "args": ["$0", "$1", 3, "$2", "$3", "$4", 7, 2]})
    inputs.append(np.ones(6, np.float32))
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for i, want in enumerate(expected):
        assert got[2 * i + 1][0] == 0
        assert got[2 * i].tobytes() == np.ascontiguousarray(want).tobytes()
    assert got[-1][0] == 1 and not got[-2].any()


def test_first_non_finite_kernel(wasm_path, tmp_path):
    """pytrain_first_non_finite: the index of the first array holding a NaN or an infinity (in the
    SIMD body or the tail, huge finite values are fine), -1 when all are finite, empty arrays skipped."""
    rng = np.random.default_rng(21)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (1027, 5, 0, 64, 3)]
    arrays[0][:4] = [3e38, -3e38, 3e38, 3e38]  # their sum would overflow: still finite
    variants = {"finite": (None, None, -1), "nan_body": (3, 17, 3), "inf_tail": (4, 2, 4),
                "neg_inf_first": (0, 1026, 0), "nan_and_inf": (1, 0, 1)}
    cases, inputs, expected = [], [], []
    for name, (which, pos, want) in variants.items():
        arrs = [a.copy() for a in arrays]
        if which is not None:
            arrs[which][pos] = {"nan_body": np.nan, "inf_tail": np.inf, "neg_inf_first": -np.inf,
                                "nan_and_inf": np.nan}[name]
            if name == "nan_and_inf":
                arrs[3][0] = np.inf
        bufs, table = [], []
        for a in arrs:
            bufs.append({"len": max(a.size, 1), "fill": True})
            inputs.append(a if a.size else np.zeros(1, np.float32))
            table += [a.size, "$%d" % (len(bufs) - 1)]
        bufs.append({"len": len(table), "ints": table})
        cases.append({"fn": "first_non_finite", "buffers": bufs, "read": [], "ret": True,
                      "args": ["$%d" % (len(bufs) - 1), len(arrs)]})
        expected.append(want)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    assert [int(g[0]) for g in got] == expected


@pytest.mark.parametrize("c_kind", [0, 1, 2])
def test_gemm_with_bias_equals_the_numpy_gemm_path(wasm_path, tmp_path, c_kind):
    """pytrain_gemm: the product (the same sgemm the numpy Gemm kernel calls in the browser) then the
    bias added as numpy's `y += C`: against the product computed by pytrain_sgemm plus numpy's add,
    to the bit, for a row bias, a full C and none, in every transposition."""
    rng = np.random.default_rng(22)
    cases, inputs, expected = [], [], []
    for ta, tb, m, n, k in ((0, 1, 64, 128, 784), (0, 0, 17, 33, 130), (1, 0, 9, 10, 70), (1, 1, 5, 7, 300)):
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        c = rng.standard_normal((m, n) if c_kind == 2 else (n,)).astype(np.float32)
        lda, ldb = a.shape[1], b.shape[1]
        bufs = [{"len": a.size, "fill": True}, {"len": b.size, "fill": True}, {"len": c.size, "fill": True},
                {"len": m * n, "fill": False}]
        inputs += [a, b, c]
        cases.append({"fn": "gemm", "buffers": bufs, "read": [3],
                      "args": [ta, tb, m, n, k, "$0", lda, "$1", ldb, "$2" if c_kind else 0, c_kind, "$3"]})
        # the reference: the plain product from the same kernel, then numpy's float32 add
        inputs += [a, b]
        cases.append({"fn": "sgemm", "buffers": [{"len": a.size, "fill": True}, {"len": b.size, "fill": True},
                                                 {"len": m * n, "fill": False}],
                      "read": [2], "args": [ta, tb, m, n, k, 1.0, "$0", lda, "$1", ldb, 0.0, "$2", n]})
        expected.append((c, m, n))
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for i, (c, m, n) in enumerate(expected):
        y, plain = got[2 * i].reshape(m, n), got[2 * i + 1].reshape(m, n)
        want = plain.copy()
        if c_kind:
            want += c.reshape(-1, n) if c_kind == 1 else c
        assert y.tobytes() == want.tobytes()  # (the product itself: tests/web/test_wasm_gemm.py)


def test_sum_rows_is_sum_to_shape_over_leading_axes_bit_for_bit(wasm_path, tmp_path):
    """The bias-gradient shapes pytrain.ops.wasm.elementwise.sum_to_shape now sends to
    pytrain_sum_rows (a 3-D transformer gradient into (C,) or (1, 1, C), a 4-D one into (H, W)) give SumToShape's numpy
    result to the bit."""
    from pytrain.ops.registry import PYTRAIN_DOMAIN

    s2s = get_kernel("SumToShape", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(23)
    cases, inputs, expected = [], [], []
    for g_shape, x_shape in (((32, 32, 128), (128,)), ((4, 8, 12), (1, 1, 12)), ((2, 3, 5, 7), (5, 7)),
                             ((3, 1030), (1, 1030))):
        g = (rng.standard_normal(g_shape) * 10).astype(np.float32)
        want = s2s(OpContext(), g, np.zeros(x_shape, np.float32))[0]
        assert want.shape == x_shape
        cols = want.size
        cases.append({"fn": "sum_rows", "buffers": [{"len": g.size, "fill": True}, {"len": cols, "fill": False}],
                      "read": [1], "args": ["$0", "$1", g.size // cols, cols]})
        inputs.append(g)
        expected.append(want)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, want in zip(got, expected):
        assert g.tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("op_code,op", [(0, "Add"), (1, "Sub"), (2, "Mul"), (3, "Div")])
def test_binary_kernel_equals_numpy_bit_for_bit(wasm_path, tmp_path, op_code, op):
    """pytrain_binary: Add/Sub/Mul/Div as the numpy kernels, to the bit (NaN, inf, zeros and a
    division by zero included), for equal shapes, a scalar on either side and a bias row on either
    side (swap: the broadcast operand on the left of Sub/Div)."""
    fn = get_kernel(op).numpy_fn
    rng = np.random.default_rng(24)
    big = (rng.standard_normal((6, 5, 35)) * 3).astype(np.float32)
    big.ravel()[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40]
    other = (rng.standard_normal((6, 5, 35)) * 3).astype(np.float32)
    other.ravel()[:6] = [1.0, 2.0, -np.inf, 0.0, 0.0, 3.0]
    row = rng.standard_normal(35).astype(np.float32)
    row[:2] = [0.0, np.inf]
    scalar = np.array(0.0 if op == "Div" else -1.5, np.float32)
    cases, inputs, expected = [], [], []
    for a, b, small, swap in ((big, other, other, 0), (big, scalar, scalar, 0), (scalar, big, scalar, 1),
                              (big, row, row, 0), (row, big, row, 1)):
        want = fn(OpContext(), a, b)[0]
        cases.append({"fn": "binary", "buffers": [{"len": big.size, "fill": True}, {"len": small.size, "fill": True},
                                                  {"len": big.size, "fill": False}],
                      "read": [2], "args": [op_code, "$0", "$1", "$2", big.size, small.size, swap]})
        inputs += [big, small]
        expected.append(want)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, want in zip(got, expected):
        nan = np.isnan(want.ravel())
        np.testing.assert_array_equal(np.isnan(g), nan)
        assert g[~nan].tobytes() == want.ravel()[~nan].tobytes()


#: (x shape, M, kernel, strides, pads (top, left, bottom, right), dilations, bias, fold)
CONV2D = [
    ((2, 3, 13, 17), 5, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False),   # a stem: stride 2, odd sizes
    ((1, 4, 9, 11), 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False),
    ((3, 5, 7, 6), 7, (3, 2), (1, 2), (2, 0, 1, 1), (2, 1), True, True),      # uneven pads, dilation, folded
    ((2, 2, 5, 5), 3, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), True, True),      # a strided 1x1
    ((1, 3, 6, 9), 2, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True, False),     # windows wider than the pads
]


@pytest.mark.parametrize("case", range(len(CONV2D)))
def test_conv2d_equals_the_numpy_conv(wasm_path, tmp_path, case):
    """pytrain_conv2d (per image an im2col reading the padding as zeros, then one product; or the images
    side by side) gives the numpy Conv kernel's output for strides, asymmetric pads, dilations, odd sizes,
    with and without bias, within float32 rounding of the sum of |terms|."""
    conv = get_kernel("Conv").numpy_fn
    rng = np.random.default_rng(17 + case)
    xs, m, k, st, pads, dil, has_bias, fold = CONV2D[case]
    n, c, h, w = xs
    x = rng.standard_normal(xs).astype(np.float32)
    wt = rng.standard_normal((m, c) + k).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if has_bias else None
    attrs = dict(strides=list(st), pads=list(pads), dilations=list(dil))
    y = conv(OpContext(), x, wt, b, **attrs)[0]
    mag = conv(OpContext(), np.abs(x), np.abs(wt), None if b is None else np.abs(b), **attrs)[0]
    win = _conv_geometry(xs, wt.shape, st, pads, dil)
    oh, ow = win.out_shape
    ck, ll = c * k[0] * k[1], oh * ow
    bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}]
    inputs = [x, wt]
    if has_bias:
        bufs.append({"len": m, "fill": True})
        inputs.append(b)
    out = len(bufs)
    bufs += [{"len": y.size, "fill": False}, {"len": ck * n * ll + m * n * ll if fold else ck * ll, "fill": False}]
    cases = [{"fn": "conv2d", "buffers": bufs, "read": [out],
              "args": ["$0", "$1", "$2" if has_bias else 0, "$%d" % out, n, c, h, w, m, k[0], k[1], oh, ow,
                       st[0], st[1], dil[0], dil[1], win.pads_begin[0], win.pads_begin[1], int(fold),
                       "$%d" % (out + 1)]}]
    got, = _call_kernels(wasm_path, tmp_path, cases, inputs)
    assert np.all(np.abs(got - y.ravel()) <= 2e-6 * (mag.ravel() + 1e-30)), np.max(np.abs(got - y.ravel()))


def test_hard_activation_equals_fused_conv_numpy_activation(wasm_path, tmp_path):
    """pytrain_hard_activation (in place) gives the numpy HardSigmoid and HardSwish kernels' values (whose
    float32 operations FusedConv's activation repeats), NaN and infinities included (SIMD body and tail)."""
    rng = np.random.default_rng(19)
    x = (rng.standard_normal(1031) * 4).astype(np.float32)
    x[:8] = [np.nan, -np.inf, np.inf, -0.0, 3.0, -3.0, 2.5, -2.5]
    x[-3:] = [np.nan, np.inf, -np.inf]
    alpha, beta = float(np.float32(0.2)), 0.5
    cases = [{"fn": "hard_activation", "buffers": [{"len": x.size, "fill": True}], "read": [0],
              "args": ["$0", x.size, 1, alpha, beta]},
             {"fn": "hard_activation", "buffers": [{"len": x.size, "fill": True}], "read": [0],
              "args": ["$0", x.size, 2, float(np.float32(1.0 / 6.0)), 0.5]}]
    sig, swish = _call_kernels(wasm_path, tmp_path, cases, [x, x])
    want_sig = get_kernel("HardSigmoid").numpy_fn(OpContext(), x, alpha=0.2, beta=0.5)[0]
    want_swish = get_kernel("HardSwish").numpy_fn(OpContext(), x)[0]
    assert _ulps(sig, want_sig).max() <= 1
    assert _ulps(swish, want_swish).max() <= 2


@pytest.mark.parametrize("op_code,op", [(0, np.add), (2, np.multiply), (1, np.subtract), (3, np.divide)])
def test_binary_rows_equals_numpy_broadcast(wasm_path, tmp_path, op_code, op):
    """pytrain_binary_rows: an (N, C, H, W) tensor with an (N, C, 1, 1) one, either side, numpy's bits."""
    rng = np.random.default_rng(23)
    a = rng.standard_normal((3, 5, 7, 3)).astype(np.float32)
    b = (rng.standard_normal((3, 5, 1, 1)) + 2).astype(np.float32)
    cases = [{"fn": "binary_rows", "buffers": [{"len": a.size, "fill": True}, {"len": b.size, "fill": True},
                                              {"len": a.size, "fill": False}], "read": [2],
              "args": [op_code, "$0", "$1", "$2", b.size, a.size // b.size, swap]} for swap in (0, 1)]
    got, got_swapped = _call_kernels(wasm_path, tmp_path, cases, [a, b, a, b])
    assert np.array_equal(got, op(a, b).ravel())
    assert np.array_equal(got_swapped, op(b, a).ravel())


def test_upsample_nearest_equals_the_numpy_resize(wasm_path, tmp_path):
    """pytrain_upsample_nearest gives Resize's nearest integer upsampling (x2 SIMD rows, odd widths, x3 by
    x1, x1 by x4) exactly."""
    from pytrain.ops.nn.op_resize import resample, kept_plan

    rng = np.random.default_rng(29)
    cases, inputs, want = [], [], []
    for shape, (fh, fw) in (((2, 3, 5, 9), (2, 2)), ((1, 2, 4, 3), (3, 1)), ((1, 1, 3, 5), (1, 4))):
        x = rng.standard_normal(shape).astype(np.float32)
        plan = kept_plan("Resize", shape, None, np.array([1, 1, fh, fw], np.float32), None, 0, None,
                         "asymmetric", -0.75, 0, "stretch", "nearest", "floor")
        want.append(np.repeat(np.repeat(x, fh, axis=2), fw, axis=3))
        assert np.array_equal(resample(x, plan), want[-1])
        cases.append({"fn": "upsample_nearest", "buffers": [{"len": x.size, "fill": True},
                                                            {"len": want[-1].size, "fill": False}],
                      "read": [1], "args": ["$0", "$1", shape[0] * shape[1], shape[2], shape[3], fh, fw]})
        inputs.append(x)
    for g, w in zip(_call_kernels(wasm_path, tmp_path, cases, inputs), want):
        assert np.array_equal(g, w.ravel())


@pytest.mark.parametrize("bidirectional", [True, False])
def test_lstm_steps_equal_the_numpy_lstm(wasm_path, tmp_path, bidirectional):
    """pytrain_lstm_steps (every step of every direction: the recurrent product, Sigmoid/Tanh/Tanh gates in
    double rounded to float32) gives the numpy LSTM kernel's Y, Y_h and Y_c to float32 rounding: odd sizes,
    initial states, saturated gates (pre-activations past +-20)."""
    rng = np.random.default_rng(31)
    T, N, I, H = 5, 3, 7, 6
    D = 2 if bidirectional else 1
    X = rng.standard_normal((T, N, I)).astype(np.float32)
    W = (rng.standard_normal((D, 4 * H, I)) * 2).astype(np.float32)
    W[0, 0] *= 20  # (saturated input gates)
    R = rng.standard_normal((D, 4 * H, H)).astype(np.float32)
    B = rng.standard_normal((D, 8 * H)).astype(np.float32)
    h0, c0 = rng.standard_normal((D, N, H)).astype(np.float32), rng.standard_normal((D, N, H)).astype(np.float32)
    direction = "bidirectional" if bidirectional else "forward"
    Y, Yh, Yc = get_kernel("LSTM").numpy_fn(OpContext(), X, W, R, B, None, h0, c0, direction=direction,
                                            hidden_size=H)
    xw = np.stack([(X if d == 0 else X[::-1]) @ W[d].T + B[d, :4 * H] + B[d, 4 * H:] for d in range(D)], 1)
    rt = np.ascontiguousarray(np.swapaxes(R, 1, 2))
    xw = np.ascontiguousarray(xw, np.float32)
    bufs = [{"len": a.size, "fill": True} for a in (xw, rt, h0, c0)]
    bufs += [{"len": T * D * N * H, "fill": False}, {"len": D * N * H, "fill": False},
             {"len": D * N * H, "fill": False}, {"len": N * 4 * H, "fill": False}]
    cases = [{"fn": "lstm_steps", "buffers": bufs, "read": [4, 5, 6],
              "args": ["$0", "$1", "$2", "$3", "$4", "$5", "$6", "$7", T, D, N, H]}]
    ys, ht, ct = _call_kernels(wasm_path, tmp_path, cases, [xw, rt, h0, c0])
    ys = ys.reshape(T, D, N, H)
    if bidirectional:
        ys[:, 1] = ys[::-1, 1].copy()  # (processing order -> time order)
    np.testing.assert_allclose(ys, Y, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(ht.reshape(D, N, H), Yh, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(ct.reshape(D, N, H), Yc, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_tiles_equal_the_numpy_conv_transpose(wasm_path, tmp_path, bias):
    """pytrain_conv_transpose_tiles (kernel == strides: one product per image, each tap's plane put in its
    place) gives the numpy ConvTranspose's output: 2x2 / stride 2 over odd sizes, 3x1 / (3, 1)."""
    conv_t = get_kernel("ConvTranspose").numpy_fn
    rng = np.random.default_rng(37)
    cases, inputs, expected = [], [], []
    for xs, m, k in (((2, 5, 7, 9), 3, (2, 2)), ((1, 3, 4, 5), 6, (3, 1))):
        n, c, h, w = xs
        x = rng.standard_normal(xs).astype(np.float32)
        wt = rng.standard_normal((c, m) + k).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32) if bias else None
        y = conv_t(OpContext(), x, wt, b, strides=list(k))[0]
        mag = conv_t(OpContext(), np.abs(x), np.abs(wt), None if b is None else np.abs(b), strides=list(k))[0]
        bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}]
        inputs += [x, wt]
        if bias:
            bufs.append({"len": m, "fill": True})
            inputs.append(b)
        out = len(bufs)
        bufs += [{"len": y.size, "fill": False}, {"len": m * k[0] * k[1] * h * w, "fill": False}]
        cases.append({"fn": "conv_transpose_tiles", "buffers": bufs, "read": [out],
                      "args": ["$0", "$1", "$2" if bias else 0, "$%d" % out, n, c, h, w, m, k[0], k[1],
                               "$%d" % (out + 1)]})
        expected.append((y, mag))
    for g, (y, mag) in zip(_call_kernels(wasm_path, tmp_path, cases, inputs), expected):
        assert np.all(np.abs(g - y.ravel()) <= 2e-6 * (mag.ravel() + 1e-30)), np.max(np.abs(g - y.ravel()))


def test_row_means_equal_global_average_pool(wasm_path, tmp_path):
    """pytrain_row_means gives the numpy GlobalAveragePool to float32 rounding (rows of 12, 7 and 1
    positions; NaN and inf rows), and a row's mean is the same bits alone and inside a batch."""
    pool = get_kernel("GlobalAveragePool").numpy_fn
    rng = np.random.default_rng(41)
    cases, inputs, want = [], [], []
    for shape in ((8, 9, 2, 6), (3, 5, 7), (2, 4, 1, 1)):
        x = rng.standard_normal(shape).astype(np.float32)
        want.append(pool(OpContext(), x)[0])
        cases.append({"fn": "row_means", "buffers": [{"len": x.size, "fill": True},
                                                     {"len": shape[0] * shape[1], "fill": False}],
                      "read": [1], "args": ["$0", "$1", shape[0] * shape[1], x.size // (shape[0] * shape[1])]})
        inputs.append(x)
    x = inputs[0]
    x[0, 0, 0, 0], x[0, 1, 1, 1] = np.nan, np.inf
    want[0] = pool(OpContext(), x)[0]
    one = np.ascontiguousarray(x[3:4])  # (the fourth sample alone)
    cases.append({"fn": "row_means", "buffers": [{"len": one.size, "fill": True}, {"len": 9, "fill": False}],
                  "read": [1], "args": ["$0", "$1", 9, 12]})
    inputs.append(one)
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.ravel(), rtol=1e-6, atol=1e-7)
    assert np.isnan(got[0][0]) and np.isinf(got[0][1])
    assert np.array_equal(got[3], got[0][27:36])


def _conv_grads(xs, wshape, group, st, pads, dil, seed):
    """X, W, dY and the numpy ConvGrad's (dX, dW) with their magnitudes (the grads of |X|, |W|, |dY|)."""
    conv_grad = get_kernel("ConvGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    wt = rng.standard_normal(wshape).astype(np.float32)
    win = _conv_geometry(xs, wshape, st, pads, dil)
    dy = rng.standard_normal((xs[0], wshape[0]) + tuple(win.out_shape)).astype(np.float32)
    attrs = dict(strides=list(st), pads=list(pads), dilations=list(dil), group=group)
    ctx = OpContext(output_mask=(True, True, False))
    dx, dw, _ = conv_grad(ctx, dy, x, wt, **attrs)
    mdx, mdw, _ = conv_grad(ctx, np.abs(dy), np.abs(x), np.abs(wt), **attrs)
    return x, wt, dy, win, [(dx, mdx), (dw, mdw)]


def _assert_grads(got, want, rel=4e-6):
    for g, (w, mag) in zip(got, want):
        assert np.all(np.abs(g - w.ravel()) <= rel * (mag.ravel() + 1e-30)), np.max(np.abs(g - w.ravel()))


@pytest.mark.parametrize("case", range(len(CONV2D)))
def test_conv2d_grad_equals_the_numpy_conv_grad(wasm_path, tmp_path, case):
    """pytrain_conv2d_grad (per image the columns, dW += dY @ cols^T, dX = col2im(W^T @ dY) with the padding
    dropped; or the images side by side) gives the numpy ConvGrad's dX and dW for strides, asymmetric pads,
    dilations, odd sizes, within float32 rounding of the sum of |terms|; each gradient alone too."""
    xs, m, k, st, pads, dil, _, fold = CONV2D[case]
    n, c, h, w = xs
    x, wt, dy, win, want = _conv_grads(xs, (m, c) + k, 1, st, pads, dil, 43 + case)
    oh, ow = win.out_shape
    ck, ll = c * k[0] * k[1], oh * ow
    tmp = ck * n * ll + m * n * ll if fold else ck * ll
    bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}, {"len": dy.size, "fill": True},
            {"len": x.size, "fill": False}, {"len": wt.size, "fill": False}, {"len": tmp, "fill": False}]
    geo = [n, c, h, w, m, k[0], k[1], oh, ow, st[0], st[1], dil[0], dil[1], win.pads_begin[0], win.pads_begin[1],
           int(fold), "$5"]
    cases = [{"fn": "conv2d_grad", "buffers": bufs, "read": [3, 4], "args": ["$0", "$1", "$2", "$3", "$4"] + geo},
             {"fn": "conv2d_grad", "buffers": bufs, "read": [3], "args": ["$0", "$1", "$2", "$3", 0] + geo},
             {"fn": "conv2d_grad", "buffers": bufs, "read": [4], "args": ["$0", "$1", "$2", 0, "$4"] + geo}]
    got = _call_kernels(wasm_path, tmp_path, cases, [x, wt, dy] * 3)
    _assert_grads(got[:2], want)
    _assert_grads(got[2:3], want[:1])
    _assert_grads(got[3:], want[1:])


def _depthwise_grad_case(x, wt, dy, win, mult, st, dil, lanes: bool) -> tuple:
    """calls.json's case for pytrain_depthwise_conv2d_grad and its filled inputs: the row walk (tmp 0, dX
    zeroed) or the lanes path, whose dX and scratch start as NaN (it must write dX whole, read no stale scratch)."""
    from pytrain.ops.wasm.conv import depthwise_lanes_scratch

    n, c, h, w = x.shape
    (kh, kw), (oh, ow) = win.kernel, win.out_shape
    bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}, {"len": dy.size, "fill": True},
            {"len": x.size, "fill": lanes}, {"len": wt.size, "fill": False}]
    inputs = [x, wt, dy] + ([np.full(x.size, np.nan, np.float32)] if lanes else [])
    if lanes:
        size = depthwise_lanes_scratch(n, win)
        bufs.append({"len": size, "fill": True})
        inputs.append(np.full(size, np.nan, np.float32))
    args = ["$0", "$1", "$2", "$3", "$4", n, c, mult, h, w, kh, kw, oh, ow, st[0], st[1], dil[0], dil[1],
            win.pads_begin[0], win.pads_begin[1], "$5" if lanes else 0]
    return {"fn": "depthwise_conv2d_grad", "buffers": bufs, "read": [3, 4], "args": args}, inputs


@pytest.mark.parametrize("lanes", [False, True])
def test_depthwise_conv2d_grad_equals_the_numpy_conv_grad(wasm_path, tmp_path, lanes):
    """pytrain_depthwise_conv2d_grad gives the numpy ConvGrad's dX and dW (group == C) for DEPTHWISE's and
    DEPTHWISE_LANES' strides, asymmetric pads, dilations, a channel multiplier and kernels wider than the input,
    by the row walk and with the images as SIMD lanes over padded planes (each path on every case)."""
    cases, inputs, want = [], [], []
    for i, (xs, mult, k, st, pads, dil) in enumerate([d[:6] for d in DEPTHWISE] + DEPTHWISE_LANES):
        c = xs[1]
        x, wt, dy, win, grads = _conv_grads(xs, (c * mult, 1) + k, c, st, pads, dil, 53 + i)
        case, filled = _depthwise_grad_case(x, wt, dy, win, mult, st, dil, lanes)
        cases.append(case)
        inputs += filled
        want += grads
    _assert_grads(_call_kernels(wasm_path, tmp_path, cases, inputs), want)


def _assert_non_finite_equal(got: list, want: list) -> None:
    """NaN where numpy has NaN, numpy's infinities, the finite values within rounding (each array has both)."""
    for g, w in zip(got, want):
        w = np.ravel(w)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        fin = np.isfinite(w)
        np.testing.assert_array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)])
        assert (~fin).any() and fin.any()
        np.testing.assert_allclose(g[fin], w[fin], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lanes", [False, True])
def test_depthwise_grad_keeps_numpys_non_finite_values(wasm_path, tmp_path, lanes):
    """The depthwise gradient's NaN and infinities are the numpy ConvGrad's, by the row walk and the lanes path:
    an inf of X at the border stays inf in dW's taps that read it (never 0 * inf: the padding zeros meet dY
    only), an inf of dY next to the padding makes NaN in dW's taps that read the padding there (numpy's columns
    multiply those zeros) and inf in dX, a NaN of dY spreads over its window; the finite values within rounding."""
    conv_grad = get_kernel("ConvGrad", PYTRAIN_DOMAIN).numpy_fn
    cases, inputs, want = [], [], []
    for i, (xs, mult, k, st, pads, dil) in enumerate(DEPTHWISE_LANES[:3]):
        c = xs[1]
        x, wt, dy, win, _ = _conv_grads(xs, (c * mult, 1) + k, c, st, pads, dil, 71 + i)
        x[0, 0, 0, 0], x[1, c - 1, -1, -1] = np.inf, -np.inf
        dy[0, 1, 0, 0], dy[1, 0, -1, 1] = np.inf, np.nan
        ctx = OpContext(output_mask=(True, True, False))
        with np.errstate(invalid="ignore"):  # (inf - inf: the NaN under test)
            dx, dw, _ = conv_grad(ctx, dy, x, wt, strides=list(st), pads=list(pads), dilations=list(dil), group=c)
        case, filled = _depthwise_grad_case(x, wt, dy, win, mult, st, dil, lanes)
        cases.append(case)
        inputs += filled
        want += [dx, dw]
    _assert_non_finite_equal(_call_kernels(wasm_path, tmp_path, cases, inputs), want)


@pytest.mark.parametrize("lanes", [False, True])
def test_depthwise_conv2d_keeps_numpys_non_finite_values(wasm_path, tmp_path, lanes):
    """The depthwise Conv's NaN and infinities are the numpy Conv's, by the row walk and the lanes path: an inf
    weight makes NaN where its tap reads the padding (numpy's columns: 0 * inf) and inf elsewhere, an inf of X
    at the border stays inf, a NaN of X spreads over the windows that read it."""
    from pytrain.ops.wasm.conv import depthwise_lanes_scratch

    conv = get_kernel("Conv").numpy_fn
    rng = np.random.default_rng(83)
    cases, inputs, want = [], [], []
    for xs, mult, k, st, pads, dil in DEPTHWISE_LANES[:3] + [DEPTHWISE[0][:6]]:
        n, c, h, w = xs
        x = rng.standard_normal(xs).astype(np.float32)
        wt = rng.standard_normal((c * mult, 1) + k).astype(np.float32)
        x[0, 0, 0, 0], x[-1, -1, 1, 2] = np.inf, np.nan
        wt[1, 0, 0, 0] = np.inf
        with np.errstate(invalid="ignore"):
            y = conv(OpContext(), x, wt, None, group=c, strides=list(st), pads=list(pads), dilations=list(dil))[0]
        win = _conv_geometry(xs, wt.shape, st, pads, dil)
        oh, ow = win.out_shape
        bufs = [{"len": x.size, "fill": True}, {"len": wt.size, "fill": True}, {"len": y.size, "fill": False}]
        args = ["$0", "$1", 0, "$2", n, c, mult, h, w, k[0], k[1], oh, ow, st[0], st[1], dil[0], dil[1],
                win.pads_begin[0], win.pads_begin[1], 0]
        inputs += [x, wt]
        if lanes:
            bufs.append({"len": depthwise_lanes_scratch(n, win, 1), "fill": False})
            args[-1] = "$3"
        cases.append({"fn": "depthwise_conv2d", "buffers": bufs, "read": [2], "args": args})
        want.append(y)
    _assert_non_finite_equal(_call_kernels(wasm_path, tmp_path, cases, inputs), want)


def test_hard_activation_grad_equals_the_numpy_grads(wasm_path, tmp_path):
    """pytrain_hard_activation_grad gives HardSigmoidGrad's and HardSwishGrad's numpy values (the same float32
    operations), the corners, NaN and infinities included (SIMD body and tail)."""
    rng = np.random.default_rng(59)
    x = (rng.standard_normal(1031) * 4).astype(np.float32)
    x[:10] = [np.nan, -np.inf, np.inf, -0.0, 3.0, -3.0, 2.5, -2.5, 2.5, -7.5]
    x[-3:] = [np.nan, np.inf, -np.inf]
    dy = rng.standard_normal(x.size).astype(np.float32)
    alpha, beta = float(np.float32(0.2)), 0.5
    bufs = [{"len": x.size, "fill": True}, {"len": x.size, "fill": True}, {"len": x.size, "fill": False}]
    cases = [{"fn": "hard_activation_grad", "buffers": bufs, "read": [2],
              "args": ["$0", "$1", "$2", x.size, 1, alpha, beta]},
             {"fn": "hard_activation_grad", "buffers": bufs, "read": [2],
              "args": ["$0", "$1", "$2", x.size, 2, 0.0, 0.0]}]
    sig, swish = _call_kernels(wasm_path, tmp_path, cases, [dy, x, dy, x])
    want_sig = get_kernel("HardSigmoidGrad", PYTRAIN_DOMAIN).numpy_fn(OpContext(), dy, x, alpha=0.2, beta=0.5)[0]
    want_swish = get_kernel("HardSwishGrad", PYTRAIN_DOMAIN).numpy_fn(OpContext(), dy, x)[0]
    assert sig.tobytes() == want_sig.tobytes()
    nan = np.isnan(want_swish)
    np.testing.assert_array_equal(np.isnan(swish), nan)
    assert swish[~nan].tobytes() == want_swish[~nan].tobytes()


@pytest.mark.parametrize("shape", [(4, 5, 7, 9), (3, 6, 1, 1), (2, 3, 13)])
def test_batchnorm_training_kernels_equal_numpy(wasm_path, tmp_path, shape):
    """pytrain_batchnorm_training gives BatchNormTraining's output, batch mean, biased variance and invstd, and
    pytrain_batchnorm_grad BatchNormGrad's dX, dScale and dB (with and without dX), within float32 rounding:
    planes of 63 (SIMD body and tail), of one value (squeeze-excite's), and a 3-D (N, C, L) input; inputs with
    a mean far from zero."""
    rng = np.random.default_rng(61)
    n, c = shape[0], shape[1]
    s = int(np.prod(shape[2:]))
    x = (rng.standard_normal(shape) * 2 + 3).astype(np.float32)
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    ctx = OpContext(output_mask=(True, True, True, True, True))
    y, _, _, mean, invstd = get_kernel("BatchNormTraining", PYTRAIN_DOMAIN).numpy_fn(
        ctx, x, scale, bias, np.zeros(c, np.float32), np.ones(c, np.float32), epsilon=1e-5)
    dx, dscale, db = get_kernel("BatchNormGrad", PYTRAIN_DOMAIN).numpy_fn(ctx, dy, x, scale, mean, invstd)
    var = x.reshape(n, c, s).astype(np.float64).var(axis=(0, 2))
    vec = {"len": c, "fill": False}
    cases = [{"fn": "batchnorm_training",
              "buffers": [{"len": x.size, "fill": True}, {"len": x.size, "fill": False}, {"len": c, "fill": True},
                          {"len": c, "fill": True}, vec, vec, vec], "read": [1, 4, 5, 6],
              "args": ["$0", "$1", "$2", "$3", "$4", "$5", "$6", n, c, s, 1e-5, 0, 0, 0, 0, 0.0]}]
    grad_bufs = [{"len": x.size, "fill": True}, {"len": x.size, "fill": True}] + [{"len": c, "fill": True}] * 3
    grad_bufs += [{"len": x.size, "fill": False}, vec, vec]
    for with_dx in (True, False):
        cases.append({"fn": "batchnorm_grad", "buffers": grad_bufs, "read": [5, 6, 7] if with_dx else [6, 7],
                      "args": ["$0", "$1", "$2", "$3", "$4", "$5" if with_dx else 0, "$6", "$7", n, c, s]})
    got = _call_kernels(wasm_path, tmp_path, cases, [x, scale, bias] + [dy, x, scale, mean, invstd] * 2)
    gy, gmean, gvar, ginv, gdx, gds, gdb, gds2, gdb2 = got
    np.testing.assert_allclose(gmean, mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gvar, var, rtol=1e-5)
    np.testing.assert_allclose(ginv, invstd, rtol=1e-5)
    np.testing.assert_allclose(gy, y.ravel(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gds, dscale, rtol=1e-4, atol=1e-4 * np.abs(dy).sum() / c)
    np.testing.assert_allclose(gdb, db, rtol=1e-5, atol=1e-5 * np.abs(dy).sum() / c)
    np.testing.assert_allclose(gdx, dx.ravel(), rtol=1e-4, atol=1e-4 * np.abs(dx).max())
    assert gds2.tobytes() == gds.tobytes() and gdb2.tobytes() == gdb.tobytes()


@pytest.mark.parametrize("shape,momentum", [((4, 5, 7, 9), 0.9), ((3, 6, 1, 1), 0.1), ((2, 3, 13), 0.99)])
def test_batchnorm_training_running_statistics_equal_numpy_bit_for_bit(wasm_path, tmp_path, shape, momentum):
    """pytrain_batchnorm_training's running mean and variance (float32 vectors, in the same call) are the numpy
    kernel's running_statistics() of the batch mean and biased variance it computes, to the bit; each output only
    where asked (the other pointer 0), and without var's own output."""
    from pytrain.ops.train.op_batchnorm_training import running_statistics

    rng = np.random.default_rng(67)
    n, c = shape[0], shape[1]
    s = int(np.prod(shape[2:]))
    x = (rng.standard_normal(shape) * 2 + 3).astype(np.float32)
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    rm, rv = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
    vec, filled, big = {"len": c, "fill": False}, {"len": c, "fill": True}, {"len": x.size, "fill": False}
    bufs = [{"len": x.size, "fill": True}, big, filled, filled, vec, vec, vec, filled, filled, vec, vec]
    ptrs = ["$%d" % i for i in range(11)]
    cases = [{"fn": "batchnorm_training", "buffers": bufs, "read": [4, 5, 9, 10],
              "args": ptrs[:7] + [n, c, s, 1e-5] + ptrs[7:] + [momentum]},
             {"fn": "batchnorm_training", "buffers": bufs, "read": [1, 4, 6, 10],
              "args": ptrs[:5] + [0, "$6", n, c, s, 1e-5, "$7", "$8", 0, "$10", momentum]}]
    got = _call_kernels(wasm_path, tmp_path, cases, [x, scale, bias, rm, rv] * 2)
    mean, var, new_mean, new_var, y2, mean2, invstd2, new_var2 = got
    want_mean, want_var = running_statistics(OpContext(output_mask=(True,) * 5), rm, rv, mean, var, n * s, momentum)
    assert new_mean.tobytes() == want_mean.tobytes() and new_mean.dtype == np.float32
    assert new_var.tobytes() == want_var.tobytes()
    assert new_var2.tobytes() == want_var.tobytes() and mean2.tobytes() == mean.tobytes()
    y, _, _, _, invstd = get_kernel("BatchNormTraining", PYTRAIN_DOMAIN).numpy_fn(
        OpContext(output_mask=(True,) * 5), x, scale, bias, rm, rv, epsilon=1e-5, momentum=momentum)
    np.testing.assert_allclose(invstd2, invstd, rtol=1e-5)
    np.testing.assert_allclose(y2, y.ravel(), rtol=1e-4, atol=1e-5)


def test_softmax_ce_planes_equal_the_numpy_loss_and_gradient(wasm_path, tmp_path):
    """pytrain_softmax_ce_planes and its gradient (SoftmaxCrossEntropyLoss over (N, C, d1, ...) scores in their own
    layout, class axis 1: DBNet's per-pixel logits) give the numpy kernels' loss, log_prob and gradient to float32
    rounding, with the coefficient pytrain.ops.wasm.softmax computes: odd plane sizes, two and many classes, tiny to
    huge scores, mean and sum; a NaN score or a label out of range makes both decline (return nonzero)."""
    loss_fn = get_kernel("SoftmaxCrossEntropyLoss").numpy_fn
    grad_fn = get_kernel("SoftmaxCrossEntropyLossGrad", PYTRAIN_DOMAIN).numpy_fn
    rng = np.random.default_rng(17)
    cases, inputs, expected = [], [], []
    for shape, scale, reduction in (((2, 2, 7, 9), 3.0, "mean"), ((3, 5, 11), 30.0, "sum"),
                                    ((1, 3, 4, 5), 500.0, "mean"), ((2, 7, 1, 1), 1e-6, "mean")):
        n, c = shape[:2]
        s = int(np.prod(shape[2:]))
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        t = rng.integers(0, c, (n,) + shape[2:]).astype(np.int64)
        loss, log_prob = loss_fn(OpContext(output_mask=[True, True]), x, t, reduction=reduction)
        dloss = np.float32(0.75)
        (dx,) = grad_fn(OpContext(), np.asarray(dloss), log_prob, t, reduction=reduction)
        coef = float(dloss) / (n * s if reduction == "mean" else 1)
        cases.append({"fn": "softmax_ce_planes", "ret": True, "read": [2, 3],
                      "args": ["$0", "$1", n, c, s, "$2", int(reduction == "mean"), "$3", "$4"],
                      "buffers": [{"len": x.size, "fill": True}, {"len": 2 * t.size, "fill": True},
                                  {"len": x.size, "fill": False}, {"len": 1, "fill": False},
                                  {"len": 4 * s, "fill": False}]})
        cases.append({"fn": "softmax_ce_planes_grad", "ret": True, "read": [2],
                      "args": ["$0", "$1", n, c, s, coef, "$2"],
                      "buffers": [{"len": x.size, "fill": True}, {"len": 2 * t.size, "fill": True},
                                  {"len": x.size, "fill": False}]})
        inputs += [x, t.view(np.float32), log_prob, t.view(np.float32)]
        expected.append((log_prob, loss, dx))
    bad = np.zeros((1, 2, 3), np.float32)
    bad[0, 1, 2] = np.nan
    for labels, x, fn in ((np.array([0, 1, 1]), bad, "softmax_ce_planes"),
                          (np.array([0, 2, 1]), np.zeros((1, 2, 3), np.float32), "softmax_ce_planes"),
                          (np.array([0, 1, 1]), bad, "softmax_ce_planes_grad"),
                          (np.array([0, 2, 1]), np.full((1, 2, 3), -0.7, np.float32), "softmax_ce_planes_grad")):
        args = (["$0", "$1", 1, 2, 3, 0, 1, "$2", "$3"] if fn == "softmax_ce_planes"
                else ["$0", "$1", 1, 2, 3, 1.0, "$2"])
        cases.append({"fn": fn, "ret": True, "read": [], "args": args,
                      "buffers": [{"len": 6, "fill": True}, {"len": 6, "fill": True}, {"len": 6, "fill": False},
                                  {"len": 12, "fill": False}]})
        inputs += [x, labels.astype(np.int64).view(np.float32)]
    got = _call_kernels(wasm_path, tmp_path, cases, inputs)
    for k, (log_prob, loss, dx) in enumerate(expected):
        got_lp, got_loss, ret, got_dx, ret_grad = got[5 * k: 5 * k + 5]
        assert ret[0] == 0 and ret_grad[0] == 0
        np.testing.assert_allclose(got_lp, log_prob.ravel(), rtol=2e-6,
                                   atol=2e-6 * max(1.0, float(np.abs(log_prob).max())))
        np.testing.assert_allclose(got_loss[0], loss, rtol=2e-6)
        np.testing.assert_allclose(got_dx, dx.ravel(), rtol=1e-5, atol=1e-7)
    assert [int(r[0]) for r in got[-4:]] == [2, 1, 2, 1]  # NaN score; label out of range; the same for the gradient


def test_softmax_ce_routes_class_axis_1_planes(monkeypatch):
    """pytrain.ops.wasm.softmax hands (N, C, d1, ...) float32 scores in their own layout to the planes kernels
    (with N * S positions for the mean) and keeps the other cases as before: (N, C) rows, weights, ignore_index."""
    from pytrain.ops.wasm import softmax as wasm_softmax

    calls = []

    class _Record:
        def __getattr__(self, name):
            return lambda *a: calls.append((name, a)) or 0

    monkeypatch.setattr(wasm_softmax, "kernels", _Record())
    monkeypatch.setattr(wasm_softmax, "threaded", lambda name, *_: getattr(_Record(), name))
    x = np.zeros((2, 3, 4, 5), np.float32)
    t = np.zeros((2, 4, 5), np.int64)
    assert wasm_softmax.softmax_cross_entropy(OpContext(output_mask=[True, True]), x, t) is not None
    assert wasm_softmax.softmax_cross_entropy_grad(OpContext(), np.float32(1.0), x, t) is not None
    assert [c[0] for c in calls] == ["softmax_ce_planes", "softmax_ce_planes_grad"]
    assert calls[0][1][2:5] == (2, 3, 20) and calls[1][1][2:6] == (2, 3, 20, 1.0 / 40)
    calls.clear()
    assert wasm_softmax.softmax_cross_entropy(OpContext(), x, t, np.ones(3, np.float32)) is None
    assert wasm_softmax.softmax_cross_entropy(OpContext(), x, t + 1, ignore_index=1) is None
    assert wasm_softmax.softmax_cross_entropy(OpContext(), x.astype(np.float64), t) is None
    assert wasm_softmax.softmax_cross_entropy(OpContext(), x[:, :, ::2], t[:, ::2]) is None
    assert wasm_softmax.softmax_cross_entropy(OpContext(), x[:, :, 0, 0].copy(), t[:, 0, 0].copy()) is not None
    assert [c[0] for c in calls] == ["softmax_ce"]
