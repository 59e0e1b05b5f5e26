"""Forward kernels of InstanceNormalization, GroupNormalization (opset 18 and 21 forms),
RMSNormalization and Attention (opset 23, with opset 24's nonpad_kv_seqlen and opset 25's window)
against onnx's reference implementation and onnxruntime, and their errors."""
from __future__ import annotations

import numpy as np
import pytest

from ops_oracle import check, run_pytrain
from pytrain.errors import GraphError, InputError, PytrainError

R = np.random.default_rng(2024)


def f32(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


ORACLES = ["ref", "ort"]


# ------------------------------------------------------------------------------ InstanceNormalization
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("shape,eps", [((2, 3, 4, 5), 1e-5), ((3, 2, 7), 1e-2), ((1, 2, 2, 3, 2), 1e-5)])
def test_instancenorm(oracle, shape, eps):
    check("InstanceNormalization", [f32(*shape) * 3 + 1, f32(shape[1]), f32(shape[1])], {"epsilon": eps},
          oracle=oracle, atol=1e-5)


def test_instancenorm_float64_and_float16():
    x = R.standard_normal((2, 3, 6))
    s, b = R.standard_normal(3), R.standard_normal(3)
    check("InstanceNormalization", [x, s, b], {}, rtol=1e-12, atol=1e-12)
    # float16: statistics in float32 (as onnxruntime), output float16
    check("InstanceNormalization", [x.astype(np.float16), s.astype(np.float16), b.astype(np.float16)], {},
          oracle="ort", rtol=1e-2, atol=1e-2)


# --------------------------------------------------------------------------------- GroupNormalization
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("shape,groups", [((2, 6, 4), 3), ((2, 4, 3, 3), 2), ((2, 4, 5), 1), ((1, 4, 2, 2), 4)])
def test_groupnorm_opset21_per_channel(oracle, shape, groups):
    check("GroupNormalization", [f32(*shape) * 2 - 1, f32(shape[1]), f32(shape[1])],
          {"num_groups": groups, "epsilon": 1e-4}, opset=21, oracle=oracle, atol=1e-5)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("shape,groups", [((2, 6, 4), 3), ((2, 4, 3, 3), 2), ((2, 4, 5), 1)])
def test_groupnorm_opset18_per_group(oracle, shape, groups):
    check("GroupNormalization", [f32(*shape), f32(groups), f32(groups)], {"num_groups": groups},
          opset=18, oracle=oracle, atol=1e-5)


def test_groupnorm_stash_type_double():
    x = f32(2, 4, 3) * 100 + 1000  # float32 statistics would lose digits here
    s, b = f32(4), f32(4)
    got = run_pytrain("GroupNormalization", [x, s, b], {"num_groups": 2, "stash_type": 11}, opset=21)[0]
    x64 = x.astype(np.float64).reshape(2, 2, -1)
    xhat = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    want = (xhat.reshape(x.shape) * s.reshape(1, 4, 1) + b.reshape(1, 4, 1)).astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset,scale_len", [(21, 2), (18, 6)])
def test_groupnorm_scale_of_the_other_form_is_refused(opset, scale_len):
    with pytest.raises(InputError) as err:
        run_pytrain("GroupNormalization", [f32(2, 6, 3), f32(scale_len), f32(scale_len)], {"num_groups": 2},
                    opset=opset)
    assert "scale" in str(err.value) and "opset" in str(err.value)


def test_groupnorm_groups_must_divide_channels():
    with pytest.raises(GraphError) as err:
        run_pytrain("GroupNormalization", [f32(2, 6, 3), f32(6), f32(6)], {"num_groups": 4}, opset=21)
    assert "num_groups=4" in str(err.value)


# ----------------------------------------------------------------------------------- RMSNormalization
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((2, 3, 8), -1, (8,)), ((2, 3, 4), 1, (3, 4)), ((2, 3, 4), -2, (4,)), ((4, 5), 0, (4, 5))])
def test_rmsnorm(oracle, shape, axis, scale_shape):
    check("RMSNormalization", [f32(*shape), f32(*scale_shape)], {"axis": axis, "epsilon": 1e-3}, opset=23,
          oracle=oracle, atol=1e-5)


def test_rmsnorm_stash_type_double_against_ort():
    # onnx's reference implements stash_type=1 only; onnxruntime does the double stash
    check("RMSNormalization", [f32(2, 3, 8) * 50 + 300, f32(8)], {"stash_type": 11}, opset=23, oracle="ort",
          atol=1e-5)


def test_rmsnorm_scale_must_broadcast():
    with pytest.raises(InputError):
        run_pytrain("RMSNormalization", [f32(2, 3, 4), f32(3)], {}, opset=23)


# ------------------------------------------------------------------------------------------ Attention
def _qkv(b=2, hq=4, hkv=2, lq=3, lkv=5, d=8, dv=6):
    return [f32(b, hq, lq, d), f32(b, hkv, lkv, d), f32(b, hkv, lkv, dv)]


ATTENTION = [
    # name, inputs, attributes, outputs; run against both oracles at opset 23
    ("plain", _qkv(hkv=4), {}, 1),
    ("grouped query", _qkv(), {}, 1),
    ("multi query", _qkv(hkv=1), {}, 1),
    ("causal self", _qkv(lq=5), {"is_causal": 1}, 1),
    ("causal cross (bottom right)", _qkv(), {"is_causal": 1}, 1),
    ("scale", _qkv(), {"scale": 0.3}, 1),
    ("softcap", _qkv(), {"softcap": 2.0}, 1),
    ("bool mask 2-D", _qkv() + [R.random((3, 5)) > 0.3], {}, 1),
    ("bool mask 4-D + causal", _qkv() + [R.random((2, 4, 3, 5)) > 0.2], {"is_causal": 1}, 1),
    ("float mask 4-D broadcast heads", _qkv() + [f32(2, 1, 3, 5)], {}, 1),
    ("float mask + causal", _qkv(lq=5) + [f32(5, 5)], {"is_causal": 1}, 1),
    ("fully masked row", _qkv(hkv=4) + [np.array([[True] * 5, [False] * 5, [True, False] * 2 + [True]])], {}, 1),
    ("3-D inputs", [f32(2, 3, 16), f32(2, 5, 8), f32(2, 5, 12)], {"q_num_heads": 4, "kv_num_heads": 2}, 1),
    ("3-D causal", [f32(1, 4, 8), f32(1, 4, 8), f32(1, 4, 8)], {"q_num_heads": 2, "kv_num_heads": 2, "is_causal": 1},
     1),
    ("cache + causal", _qkv() + [None, f32(2, 2, 2, 8), f32(2, 2, 2, 6)], {"is_causal": 1}, 3),
    ("qk mode 1", _qkv() + [f32(3, 5)], {"qk_matmul_output_mode": 1, "softcap": 1.5}, 4),
    ("qk mode 2", _qkv() + [f32(3, 5)], {"qk_matmul_output_mode": 2, "softcap": 1.5}, 4),
    ("qk mode 3", _qkv() + [f32(3, 5)], {"qk_matmul_output_mode": 3}, 4),
    ("qk mode 0", _qkv() + [f32(3, 5)], {"qk_matmul_output_mode": 0}, 4),
]


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("name,inputs,attrs,n_out", ATTENTION, ids=[c[0] for c in ATTENTION])
def test_attention(oracle, name, inputs, attrs, n_out):
    check("Attention", inputs, attrs, n_outputs=n_out, opset=23, oracle=oracle, atol=1e-5)


def test_attention_qk_mode0_with_softcap_is_the_raw_product():
    """The spec (and onnxruntime): mode 0 is the QK product before softcap. onnx's reference
    returns the softcapped one here, so onnxruntime is the oracle."""
    check("Attention", _qkv() + [f32(3, 5)], {"qk_matmul_output_mode": 0, "softcap": 1.5}, n_outputs=4, opset=23,
          oracle="ort", atol=1e-5)


def test_attention_short_mask_padded_like_the_reference():
    """A mask shorter than the keys (but not 1) is padded with -inf as onnx's reference does
    (onnxruntime refuses it)."""
    check("Attention", _qkv() + [f32(3, 3)], {}, opset=23, oracle="ref", atol=1e-5)


def test_attention_softmax_precision_float16_inputs():
    q, k, v = (x.astype(np.float16) for x in _qkv())
    check("Attention", [q, k, v], {"softmax_precision": 1}, opset=23, oracle="ref", rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_nonpad_kv_seqlen_opset24(oracle, causal):
    check("Attention", _qkv() + [None, None, None, np.array([3, 5], dtype=np.int64)], {"is_causal": causal},
          opset=24, oracle=oracle, atol=1e-5)


@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("left,right,causal", [(1, 0, 0), (2, -1, 1), (-1, 1, 0)])
def test_attention_sliding_window_opset25(oracle, left, right, causal):
    check("Attention", _qkv(lq=5), {"left_window_size": left, "right_window_size": right, "is_causal": causal},
          opset=25, oracle=oracle, atol=1e-5)


@pytest.mark.parametrize("inputs,attrs,err,words", [
    ([f32(2, 3, 16), f32(2, 5, 8), f32(2, 5, 8)], {}, GraphError, "q_num_heads"),
    ([f32(2, 3, 15), f32(2, 5, 8), f32(2, 5, 8)], {"q_num_heads": 4, "kv_num_heads": 2}, InputError, "hidden size"),
    (_qkv(hq=3), {}, InputError, "multiple"),
    (_qkv(), {"qk_matmul_output_mode": 4}, GraphError, "qk_matmul_output_mode"),
    (_qkv(), {"softcap": -1.0}, GraphError, "softcap"),
    (_qkv() + [None, f32(2, 2, 1, 8)], {}, InputError, "past_value"),
    (_qkv() + [f32(3, 7)], {}, InputError, "attn_mask"),
])
def test_attention_errors(inputs, attrs, err, words):
    with pytest.raises(err) as e:
        run_pytrain("Attention", inputs, attrs, opset=23)
    assert words in str(e.value)


def test_errors_are_pytrain_errors():
    with pytest.raises(PytrainError):
        run_pytrain("InstanceNormalization", [f32(2, 3), f32(3), f32(3)], {})
    with pytest.raises(PytrainError):
        run_pytrain("InstanceNormalization", [f32(2, 3, 4), f32(2), f32(3)], {})


def test_groupnorm_num_groups_is_required():
    with pytest.raises(GraphError) as err:
        run_pytrain("GroupNormalization", [f32(2, 6, 3), f32(6), f32(6)], {}, opset=21)
    assert "num_groups" in str(err.value)
