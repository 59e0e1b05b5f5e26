"""The quantization kernels (pytrain/ops/quant) against onnxruntime, and onnx.reference where it has the op:
QuantizeLinear/DequantizeLinear per tensor, per axis (negative axes too) and blocked (odd lengths),
DynamicQuantizeLinear, MatMulInteger, ConvInteger, and com.microsoft MatMulNBits (weights made by
onnxruntime's own MatMul4BitsQuantizer) and GatherBlockQuantized. Integer outputs must be equal."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ops_oracle import assert_same, run_ort, run_pytrain, run_reference

from pytrain.errors import InputError
from pytrain.ops.quant.blocks import MS_DOMAIN, NBitsLayout, nbits_dequantize, nbits_quantize, pack_bits, unpack_bits
from pytrain.engine.runtime import InferenceSession


def rnd(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def ints(dtype, *shape, seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, size=shape).astype(dtype)


def both(op, inputs, attrs, opset, n_outputs=1, reference=True, ort=True):
    """pytrain's outputs equal onnxruntime's and onnx.reference's (which has Q/DQ from opset 19 only): exactly
    for integers, 1e-6 for floats."""
    got = run_pytrain(op, inputs, attrs, n_outputs, opset)
    oracles = [("onnxruntime", run_ort(op, inputs, attrs, n_outputs, opset))] if ort else []
    if reference and (opset >= 19 or op not in ("QuantizeLinear", "DequantizeLinear")):
        oracles.append(("onnx.reference", run_reference(op, inputs, attrs, n_outputs, opset)))
    for name, want in oracles:
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, rtol=1e-6, atol=1e-7, what="%s output %d vs %s" % (op, i, name))
    return got


# ---- QuantizeLinear / DequantizeLinear ------------------------------------------------------------------
@pytest.mark.parametrize("zp_type", [np.uint8, np.int8])
@pytest.mark.parametrize("opset", [10, 13, 21])
def test_per_tensor(zp_type, opset):
    x = rnd(3, 7, scale=3.0)
    scale, zp = np.asarray(0.037, np.float32), np.asarray(5 if zp_type == np.uint8 else -3, zp_type)
    q = both("QuantizeLinear", [x, scale, zp], {}, opset)[0]
    assert q.dtype == zp_type and q.min() == np.iinfo(zp_type).min  # saturates
    both("DequantizeLinear", [q, scale, zp], {}, opset)
    both("QuantizeLinear", [x, scale], {}, opset)   # no zero point: uint8, zero point 0


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_per_axis(axis):
    x = rnd(4, 5, 3, scale=2.0)
    n = x.shape[axis]
    scale = np.linspace(0.01, 0.05, n).astype(np.float32)
    zp = np.arange(n, dtype=np.int8) - 2
    q = both("QuantizeLinear", [x, scale, zp], {"axis": axis}, 13)[0]
    both("DequantizeLinear", [q, scale, zp], {"axis": axis}, 13)
    both("DequantizeLinear", [q, scale], {"axis": axis}, 21)


@pytest.mark.parametrize("shape,axis,block", [((3, 37), -1, 16), ((37, 5), 0, 8), ((2, 9, 4), 1, 4),
                                              ((2, 3, 33), 2, 32)])
@pytest.mark.parametrize("zp_type", [np.uint8, np.int8, None])
def test_blocked(shape, axis, block, zp_type):
    x = rnd(*shape, scale=2.0)
    blocks = list(shape)
    blocks[axis] = -(-shape[axis] // block)
    scale = (np.random.default_rng(1).random(blocks) * 0.05 + 0.01).astype(np.float32)
    zp = None if zp_type is None else ints(zp_type, *blocks, seed=2) // 8
    attrs = {"axis": axis, "block_size": block}
    q = both("QuantizeLinear", [x, scale, zp], attrs, 21)[0]
    both("DequantizeLinear", [q, scale, zp], attrs, 21)


def test_sixteen_bit_and_output_dtype():
    x = rnd(5, 6, scale=100.0)
    for t in (np.int16, np.uint16):
        q = both("QuantizeLinear", [x, np.asarray(0.01, np.float32), np.asarray(7, t)], {}, 21)[0]
        both("DequantizeLinear", [q, np.asarray(0.01, np.float32), np.asarray(7, t)], {}, 21)
    q = run_pytrain("QuantizeLinear", [x, np.asarray(0.5, np.float32)], {"output_dtype": TensorProto.INT8}, 1, 21)[0]
    assert q.dtype == np.int8


def test_refusals_name_what_is_wrong():
    x = rnd(4, 6)
    with pytest.raises(InputError, match="opset 10 takes a scalar y_scale"):
        run_pytrain("QuantizeLinear", [x, np.full(6, 0.1, np.float32)], {}, 1, 10)
    with pytest.raises(InputError, match="blocked quantization .* needs opset 21"):
        run_pytrain("QuantizeLinear", [x, np.full((4, 2), 0.1, np.float32)], {"block_size": 3}, 1, 19)
    with pytest.raises(InputError, match=r"blocked y_scale must have shape \[4, 2\]"):
        run_pytrain("QuantizeLinear", [x, np.full((4, 3), 0.1, np.float32)], {"block_size": 3}, 1, 21)
    with pytest.raises(InputError, match="per-axis x_scale must be 1-D of length 6"):
        run_pytrain("DequantizeLinear", [ints(np.int8, 4, 6), np.full(4, 0.1, np.float32)], {"axis": -1}, 1, 13)


# ---- DynamicQuantizeLinear, MatMulInteger, ConvInteger -----------------------------------------------------
@pytest.mark.parametrize("x", [rnd(3, 11, scale=4.0), np.abs(rnd(7, seed=3)) + 1, -np.abs(rnd(2, 3, 5, seed=4)),
                               np.zeros((2, 3), np.float32), np.linspace(-1, 2.5, 256).astype(np.float32)],
                         ids=["mixed", "positive", "negative", "zeros", "ramp"])
def test_dynamic_quantize_linear(x):
    # all zeros: onnxruntime's scale is 1, onnx.reference's 1/255 (the spec divides 0 by 255); pytrain follows
    # onnxruntime, the runtime transformers.js uses
    both("DynamicQuantizeLinear", [x], {}, 11, n_outputs=3, reference=bool(x.any()))


# onnxruntime's x86 AVX2 kernel for uint8 x int8 adds pairs of products in int16 with saturation
# (vpmaddubsw): with int8 values beyond +-63 its sums can be off (measured: 354 of 512 entries for full-range
# random inputs on this machine's AVX2). pytrain is exact, as the spec and onnx.reference are; onnxruntime is
# compared where it cannot saturate (uint8 x uint8, int8 weights within +-63, as quantize_dynamic's
# reduce_range keeps them).
@pytest.mark.parametrize("sa,sb", [((3, 7), (7, 5)), ((2, 5, 33), (33, 4)), ((1, 2, 3, 6), (2, 6, 3))])
def test_matmul_integer(sa, sb):
    a, b = ints(np.uint8, *sa), ints(np.int8, *sb, seed=1)
    both("MatMulInteger", [a, b, np.asarray(131, np.uint8), np.asarray(-2, np.int8)], {}, 10, ort=False)
    both("MatMulInteger", [a, b // 3], {}, 10)
    both("MatMulInteger", [a, ints(np.uint8, *sb, seed=3), np.asarray(131, np.uint8), np.asarray(7, np.uint8)], {}, 10)
    both("MatMulInteger", [ints(np.int8, *sa, seed=2), ints(np.uint8, *sb, seed=3)], {}, 10, ort=False)


def test_matmul_integer_per_row_and_column_zero_points():
    # onnxruntime's CPU kernel takes per-tensor zero points only; the spec's per-row/per-column ones against numpy
    a, b = ints(np.uint8, 4, 9), ints(np.uint8, 9, 6, seed=1)
    za, zb = ints(np.uint8, 4, seed=2), ints(np.uint8, 6, seed=3)
    got = run_pytrain("MatMulInteger", [a, b, za, zb], {}, 1, 10)[0]
    want = (a.astype(np.int64) - za[:, None]) @ (b.astype(np.int64) - zb[None, :])
    assert got.dtype == np.int32 and np.array_equal(got, want)


def test_matmul_integer_wide_sums_are_exact():
    # 255 * 255 * 600 > 2**24: the float32 product would round; the kernel takes float64
    a, b = np.full((2, 600), 255, np.uint8), np.full((600, 3), 255, np.uint8)
    assert run_pytrain("MatMulInteger", [a, b], {}, 1, 10)[0][0, 0] == 255 * 255 * 600


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 2, 1, 0], "strides": [2, 1]}, {"dilations": [2, 1], "group": 2},
                                   {"auto_pad": "SAME_UPPER"}])
def test_conv_integer(attrs):
    x, w = ints(np.uint8, 2, 4, 7, 6), ints(np.int8, 6, 4 // attrs.get("group", 1), 3, 2, seed=1)
    both("ConvInteger", [x, w, np.asarray(100, np.uint8), np.asarray(1, np.int8)], attrs, 10)
    both("ConvInteger", [x, w], attrs, 10)


# ---- com.microsoft MatMulNBits ------------------------------------------------------------------------------
def _ms_model(node, inputs, outputs, inits):
    graph = helper.make_graph([node], "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 10
    return model


def _run_both(model, feeds):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = InferenceSession(model.SerializeToString()).run(None, feeds)
    return got, want


def _ort_quantized_matmul(K, N, block, symmetric, bits=4):
    """A MatMul of an input (2, 3, K) by a (K, N) weight, quantized by onnxruntime's MatMul4BitsQuantizer."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    w = rnd(K, N, seed=K + N)
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, N])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    q = MatMulNBitsQuantizer(model, algo_config=DefaultWeightOnlyQuantConfig(
        block_size=block, is_symmetric=symmetric, bits=bits))
    q.process()
    return q.model.model, w


@pytest.mark.parametrize("K,N,block,symmetric", [(64, 8, 32, True), (70, 13, 16, True), (70, 13, 32, False),
                                                 (33, 5, 16, False)])
def test_matmul_nbits_from_onnxruntime_quantizer(K, N, block, symmetric):
    model, w = _ort_quantized_matmul(K, N, block, symmetric)
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits"]
    x = rnd(2, 3, K, seed=5)
    got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    # and the weight it holds is the float weight within the 4-bit step of each block
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    n = model.graph.node[0]
    attrs = {a.name: a.i for a in n.attribute}
    zp = inits.get(n.input[3]) if len(n.input) > 3 and n.input[3] else None
    deq = nbits_dequantize(inits[n.input[1]], inits[n.input[2]], zp,
                           NBitsLayout(attrs["K"], attrs["N"], attrs["bits"], attrs["block_size"]))
    step = np.abs(w).max() / 7
    assert np.abs(deq.T - w).max() <= step


def test_matmul_nbits_eight_bits_bias_and_float_zero_points():
    K, N, block = 40, 6, 16
    lay = NBitsLayout(K, N, 8, block)
    rng = np.random.default_rng(0)
    B = rng.integers(0, 256, size=(N, lay.blocks, lay.blob)).astype(np.uint8)
    scales = (rng.random(N * lay.blocks) * 0.01 + 0.001).astype(np.float32)
    bias = rnd(N, seed=2)
    for zp in (None, rng.integers(0, 256, size=N * lay.blocks).astype(np.uint8)):
        names = ["x", "B", "scales", "zp" if zp is not None else "", "", "bias"]
        node = helper.make_node("MatMulNBits", names, ["y"], domain=MS_DOMAIN, K=K, N=N, bits=8, block_size=block)
        inits = [numpy_helper.from_array(v, k) for k, v in [("B", B), ("scales", scales), ("bias", bias)]]
        if zp is not None:
            inits.append(numpy_helper.from_array(zp, "zp"))
        model = _ms_model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, N])], inits)
        got, want = _run_both(model, {"x": rnd(5, K, seed=3)})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_nbits_packing_round_trips_and_requantizes_like_onnxruntime():
    v = np.random.default_rng(0).integers(0, 16, size=(3, 7)).astype(np.uint8)
    assert np.array_equal(unpack_bits(pack_bits(v, 4), 4, 7), v)
    v2 = np.random.default_rng(1).integers(0, 4, size=(2, 9)).astype(np.uint8)
    assert np.array_equal(unpack_bits(pack_bits(v2, 2), 2, 9), v2)
    for symmetric in (True, False):
        model, w = _ort_quantized_matmul(70, 13, 32, symmetric)
        n = model.graph.node[0]
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        lay = NBitsLayout(70, 13, 4, 32)
        B, s, zp = nbits_quantize(w.T, lay, symmetric)
        np.testing.assert_allclose(s.reshape(-1), inits[n.input[2]].reshape(-1), rtol=1e-6)
        ours = nbits_dequantize(B, s, zp, lay)
        theirs = nbits_dequantize(inits[n.input[1]], inits[n.input[2]],
                                  inits[n.input[3]] if len(n.input) > 3 and n.input[3] else None, lay)
        # the same codes but where a value sits on a rounding tie
        assert np.mean(np.isclose(ours, theirs, atol=1e-7)) > 0.99


# ---- com.microsoft GatherBlockQuantized ---------------------------------------------------------------------
@pytest.mark.parametrize("bits,with_zp,idx_shape", [(4, False, (2, 3)), (4, True, (5,)), (8, True, (4,)),
                                                    (2, False, (3,))])
def test_gather_block_quantized(bits, with_zp, idx_shape):
    rows, cols, block = 11, 48, 16
    rng = np.random.default_rng(bits)
    data = rng.integers(0, 256, size=(rows, cols * bits // 8)).astype(np.uint8)
    blocks = cols // block
    scales = (rng.random((rows, blocks)) * 0.1).astype(np.float32)
    idx = rng.integers(-rows, rows, size=idx_shape).astype(np.int64)
    ins = [helper.make_tensor_value_info("idx", TensorProto.INT64, list(idx_shape))]
    inits = [numpy_helper.from_array(data, "data"), numpy_helper.from_array(scales, "scales")]
    names = ["data", "idx", "scales"]
    if with_zp:
        zp = rng.integers(0, 256, size=(rows, -(-blocks * bits // 8))).astype(np.uint8)
        inits.append(numpy_helper.from_array(zp, "zp"))
        names.append("zp")
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain=MS_DOMAIN, gather_axis=0, quantize_axis=1,
                            block_size=block, bits=bits)
    model = _ms_model(node, ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    got, want = _run_both(model, {"idx": idx})
    assert got[0].shape == want[0].shape == idx_shape + (cols,)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)


def test_gather_block_quantized_refuses_an_index_out_of_range():
    data, scales = np.zeros((4, 8), np.uint8), np.ones((4, 1), np.float32)
    with pytest.raises(InputError, match="out of range"):
        run_pytrain("GatherBlockQuantized", [data, np.asarray([4]), scales], {"block_size": 16}, domain=MS_DOMAIN)
