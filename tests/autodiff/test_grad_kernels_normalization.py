"""Gradient kernels of the normalization layers and of Attention (InstanceNormalizationGrad,
GroupNormalizationGrad, RMSNormalizationGrad, AttentionGrad) against float64 central finite
differences of pytrain's own forward kernels (which tests/ops/test_normalization_and_attention.py checks
against onnx's reference and onnxruntime), and every kernel of the family on Python 3.8 + numpy 1.17
(the browser's) giving the same outputs as here."""
from __future__ import annotations

import numpy as np
import pytest

from gradcheck import numeric_grad, run_kernel
from pytrain.ops import OpContext, get_kernel
from test_python38_numpy117 import py38  # noqa: F401  (the fixture: a Python 3.8 venv with numpy 1.17.5)

RTOL, ATOL = 1e-5, 1e-7


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def fwd(op: str, *inputs, opset: int = 23, **attrs) -> np.ndarray:
    """Output 0 of pytrain's standard forward kernel at ``opset``."""
    ctx = OpContext(opset=opset, output_mask=(True,))
    return get_kernel(op).fn(ctx, *inputs, **attrs)[0]


def check_against_fd(op: str, grads, inputs, wrt, dy, opset: int = 23, **attrs) -> None:
    """grads[k] is the gradient of sum(dy * op(inputs)) w.r.t. inputs[wrt[k]]."""
    def f(*xs):  # numeric_grad copies its inputs: an absent optional input comes back as array(None)
        xs = [None if x.dtype == object else x for x in xs]
        return np.sum(dy * fwd(op, *xs, opset=opset, **attrs))
    for g, i in zip(grads, wrt):
        want = numeric_grad(f, inputs, i)
        assert g is not None and g.shape == want.shape and g.dtype == np.float64
        np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL, err_msg="%s d/dinput%d" % (op, i))


# ------------------------------------------------------------------------------ InstanceNormalization
@pytest.mark.parametrize("shape,eps", [((2, 3, 5), 1e-5), ((2, 2, 3, 4), 1e-2), ((1, 4, 2, 2, 2), 1e-5)])
def test_instancenorm_grad(shape, eps):
    r = rng(1)
    x, s, b = r.standard_normal(shape), r.standard_normal(shape[1]), r.standard_normal(shape[1])
    dy = r.standard_normal(shape)
    grads = run_kernel("InstanceNormalizationGrad", dy, x, s, epsilon=eps)
    check_against_fd("InstanceNormalization", grads, [x, s, b], [0, 1, 2], dy, epsilon=eps)


def test_instancenorm_grad_skips_unwanted_outputs():
    r = rng(2)
    x, s, dy = r.standard_normal((2, 3, 4)), r.standard_normal(3), r.standard_normal((2, 3, 4))
    dx, ds, db = run_kernel("InstanceNormalizationGrad", dy, x, s, wants=(False, True, False))
    assert dx is None and db is None and ds.shape == (3,)


# --------------------------------------------------------------------------------- GroupNormalization
@pytest.mark.parametrize("shape,groups,per_channel", [
    ((2, 6, 4), 3, True),       # opset 21: scale and bias per channel
    ((2, 4, 3, 2), 2, True),
    ((2, 6, 5), 1, True),       # one group: layer normalization over (C, ...)
    ((3, 4, 2), 4, True),       # one channel per group: instance normalization
    ((2, 6, 4), 3, False),      # opset 18: per group
    ((2, 4, 3, 2), 2, False),
])
def test_groupnorm_grad(shape, groups, per_channel):
    r = rng(3)
    n_affine = shape[1] if per_channel else groups
    x, s, b = r.standard_normal(shape), r.standard_normal(n_affine), r.standard_normal(n_affine)
    dy = r.standard_normal(shape)
    grads = run_kernel("GroupNormalizationGrad", dy, x, s, num_groups=groups, epsilon=1e-3)
    check_against_fd("GroupNormalization", grads, [x, s, b], [0, 1, 2], dy, opset=21 if per_channel else 18,
                     num_groups=groups, epsilon=1e-3)


def test_groupnorm_grad_float32_stays_float32():
    r = rng(4)
    x, s = r.standard_normal((2, 4, 3)).astype(np.float32), r.standard_normal(4).astype(np.float32)
    dx, ds, db = run_kernel("GroupNormalizationGrad", r.standard_normal((2, 4, 3)).astype(np.float32), x, s,
                            num_groups=2)
    assert dx.dtype == ds.dtype == db.dtype == np.float32


# ----------------------------------------------------------------------------------- RMSNormalization
@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((3, 5), -1, (5,)),
    ((2, 3, 4), -1, (4,)),
    ((2, 3, 4), 1, (3, 4)),
    ((2, 3, 4), -2, (4,)),      # scale broadcast over the normalised shape
    ((2, 3, 4), 0, (1, 4)),
])
def test_rmsnorm_grad(shape, axis, scale_shape):
    r = rng(5)
    x, s, dy = r.standard_normal(shape), r.standard_normal(scale_shape), r.standard_normal(shape)
    grads = run_kernel("RMSNormalizationGrad", dy, x, s, axis=axis, epsilon=1e-4)
    check_against_fd("RMSNormalization", grads, [x, s], [0, 1], dy, axis=axis, epsilon=1e-4)


# ------------------------------------------------------------------------------------------ Attention
def _f64(r, *shape):
    return r.standard_normal(shape)


ATTENTION_CASES = [
    # name, builder(r) -> (inputs, attrs); every float input but the cache is checked
    ("4-D", lambda r: ([_f64(r, 2, 2, 3, 4), _f64(r, 2, 2, 5, 4), _f64(r, 2, 2, 5, 3)], {})),
    ("causal", lambda r: ([_f64(r, 1, 2, 4, 4), _f64(r, 1, 2, 4, 4), _f64(r, 1, 2, 4, 2)], {"is_causal": 1})),
    ("causal cross", lambda r: ([_f64(r, 1, 1, 3, 4), _f64(r, 1, 1, 5, 4), _f64(r, 1, 1, 5, 2)], {"is_causal": 1})),
    ("scale softcap", lambda r: ([_f64(r, 1, 2, 3, 4), _f64(r, 1, 2, 4, 4), _f64(r, 1, 2, 4, 4)],
                                 {"scale": 0.7, "softcap": 1.5})),
    ("grouped query 3-D", lambda r: ([_f64(r, 2, 3, 8), _f64(r, 2, 4, 4), _f64(r, 2, 4, 6)],
                                     {"q_num_heads": 4, "kv_num_heads": 2})),
    ("float mask (2-D, trained)", lambda r: ([_f64(r, 2, 2, 3, 4), _f64(r, 2, 2, 4, 4), _f64(r, 2, 2, 4, 3),
                                              _f64(r, 3, 4)], {})),
    ("float mask (4-D, broadcast heads) + causal", lambda r: (
        [_f64(r, 2, 2, 4, 4), _f64(r, 2, 2, 4, 4), _f64(r, 2, 2, 4, 3), _f64(r, 2, 1, 4, 4)], {"is_causal": 1})),
    ("float mask broadcast over keys", lambda r: ([_f64(r, 1, 2, 3, 4), _f64(r, 1, 2, 4, 4), _f64(r, 1, 2, 4, 3),
                                                   _f64(r, 2, 3, 1)], {})),
]


def _wrt(inputs):
    return [i for i, x in enumerate(inputs) if x is not None and x.dtype == np.float64]


@pytest.mark.parametrize("name,build", ATTENTION_CASES, ids=[c[0] for c in ATTENTION_CASES])
def test_attention_grad(name, build):
    r = rng(6)
    inputs, attrs = build(r)
    y = fwd("Attention", *inputs, **attrs)
    dy = r.standard_normal(y.shape)
    grads = run_kernel("AttentionGrad", dy, *inputs, **attrs)
    wrt = _wrt(inputs)
    check_against_fd("Attention", [grads[i] for i in wrt], inputs, wrt, dy, **attrs)


def test_attention_grad_bool_mask_and_cache():
    """A boolean mask (with a fully masked query row), and a key/value cache: the cache's part of
    the gradient comes out separately (outputs 4 and 5)."""
    r = rng(7)
    q, k, v = _f64(r, 1, 2, 3, 4), _f64(r, 1, 2, 2, 4), _f64(r, 1, 2, 2, 3)
    pk, pv = _f64(r, 1, 2, 3, 4), _f64(r, 1, 2, 3, 3)
    mask = np.array([[True, False, True, True, False], [False] * 5, [True, True, False, True, True]])
    inputs = [q, k, v, mask, pk, pv]
    y = fwd("Attention", *inputs, is_causal=1)
    assert np.all(y[:, :, 1] == 0)  # the fully masked row
    dy = r.standard_normal(y.shape)
    dq, dk, dv, dmask, dpk, dpv = run_kernel("AttentionGrad", dy, *inputs, is_causal=1)
    assert dmask is None
    check_against_fd("Attention", [dq, dk, dv, dpk, dpv], inputs, [0, 1, 2, 4, 5], dy, is_causal=1)


def test_attention_grad_nonpad_and_window():
    r = rng(8)
    q, k, v = _f64(r, 2, 2, 3, 4), _f64(r, 2, 2, 5, 4), _f64(r, 2, 2, 5, 3)
    inputs = [q, k, v, None, None, None, np.array([4, 5], dtype=np.int64)]
    attrs = {"is_causal": 1, "left_window_size": 2}
    y = fwd("Attention", *inputs, opset=25, **attrs)
    dy = r.standard_normal(y.shape)
    grads = run_kernel("AttentionGrad", dy, *inputs, **attrs)
    check_against_fd("Attention", grads[:3], inputs, [0, 1, 2], dy, opset=25, **attrs)


def test_attention_grad_float32():
    r = rng(9)
    q, k, v = (r.standard_normal(s).astype(np.float32) for s in ((2, 2, 3, 4), (2, 2, 4, 4), (2, 2, 4, 3)))
    dy = r.standard_normal((2, 2, 3, 3)).astype(np.float32)
    grads64 = run_kernel("AttentionGrad", dy.astype(np.float64), *(x.astype(np.float64) for x in (q, k, v)))
    grads32 = run_kernel("AttentionGrad", dy, q, k, v)
    for g32, g64 in zip(grads32[:3], grads64[:3]):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ the browser's Python: 3.8 + numpy 1.17
PY38_SCRIPT = r"""
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.ops import OpContext, get_kernel
d = np.load(sys.argv[2])
out = {"numpy_version": np.array(np.__version__)}
for case in d["cases"]:
    case = str(case)
    op, domain, opset = str(d[case + "/op"]), str(d[case + "/domain"]), int(d[case + "/opset"])
    ins = [None if int(d[case + "/absent%d" % i]) else d[case + "/in%d" % i] for i in range(int(d[case + "/n"]))]
    attrs = json.loads(str(d[case + "/attrs"]))
    res = get_kernel(op, domain).fn(OpContext(opset=opset, output_mask=(True,) * 6), *ins, **attrs)
    for i, v in enumerate(res):
        if v is not None:
            out["%s/out%d" % (case, i)] = v
np.savez(sys.argv[3], **out)
"""


def _py38_cases():
    r = rng(10)

    def f(*s):
        return r.standard_normal(s).astype(np.float32)
    x, s, b = f(2, 6, 3, 4), f(6), f(6)
    q, k, v = f(2, 4, 3, 8), f(2, 2, 5, 8), f(2, 2, 5, 6)
    pt = "ai.pytrain"
    return {
        "instancenorm": ("InstanceNormalization", "", 17, [x, s, b], {}),
        "instancenorm_grad": ("InstanceNormalizationGrad", pt, 17, [f(*x.shape), x, s], {}),
        "groupnorm21": ("GroupNormalization", "", 21, [x, s, b], {"num_groups": 3}),
        "groupnorm18": ("GroupNormalization", "", 18, [x, s[:2], b[:2]], {"num_groups": 2}),
        "groupnorm_grad": ("GroupNormalizationGrad", pt, 21, [f(*x.shape), x, s], {"num_groups": 3}),
        "rmsnorm": ("RMSNormalization", "", 23, [x, f(3, 4)], {"axis": 2}),
        "rmsnorm_grad": ("RMSNormalizationGrad", pt, 23, [f(*x.shape), x, f(4)], {}),
        "layernorm_grad": ("LayerNormalizationGrad", pt, 17, [f(*x.shape), x, f(4), np.zeros((2, 6, 3, 1), np.float32),
                                                              np.ones((2, 6, 3, 1), np.float32)], {}),
        "attention": ("Attention", "", 23, [q, k, v, r.random((3, 5)) > 0.3, f(2, 2, 2, 8), f(2, 2, 2, 6)],
                      {"is_causal": 1, "softcap": 2.0, "qk_matmul_output_mode": 3}),
        "attention_3d": ("Attention", "", 25, [f(2, 3, 16), f(2, 5, 8), f(2, 5, 8), None, None, None,
                                               np.array([3, 5], dtype=np.int64)],
                         {"q_num_heads": 4, "kv_num_heads": 2, "left_window_size": 1}),
        "attention_grad": ("AttentionGrad", pt, 23, [f(2, 4, 3, 6), q, k, v, f(3, 5), f(2, 2, 2, 8), f(2, 2, 2, 6)],
                           {"is_causal": 1, "softcap": 2.0}),
    }


def test_kernels_on_python38_numpy117(py38, tmp_path):
    import json
    import subprocess

    from test_python38_numpy117 import ROOT

    feed = {"cases": np.array(sorted(_py38_cases()))}
    expected = {}
    for case, (op, domain, opset, ins, attrs) in _py38_cases().items():
        feed.update({case + "/op": np.array(op), case + "/domain": np.array(domain), case + "/opset": np.array(opset),
                     case + "/n": np.array(len(ins)), case + "/attrs": np.array(json.dumps(attrs))})
        for i, x in enumerate(ins):
            feed[case + "/absent%d" % i] = np.array(int(x is None))
            if x is not None:
                feed[case + "/in%d" % i] = x
        res = get_kernel(op, domain).fn(OpContext(opset=opset, output_mask=(True,) * 6), *ins, **attrs)
        expected.update({"%s/out%d" % (case, i): y for i, y in enumerate(res) if y is not None})
    np.savez(tmp_path / "in.npz", **feed)
    (tmp_path / "run.py").write_text(PY38_SCRIPT)
    subprocess.run([str(py38), str(tmp_path / "run.py"), str(ROOT), str(tmp_path / "in.npz"),
                    str(tmp_path / "out.npz")], check=True, timeout=300)
    got = np.load(tmp_path / "out.npz")
    assert str(got["numpy_version"]) == "1.17.5"
    assert sorted(k for k in got.files if k != "numpy_version") == sorted(expected)
    for key, want in expected.items():
        assert got[key].dtype == want.dtype, key
        np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-6, err_msg=key)
