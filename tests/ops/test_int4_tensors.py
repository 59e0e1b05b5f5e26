"""int4 / uint4 tensors (ONNX 1.16 on: TensorProto INT4 = 22, UINT4 = 21, two values a byte, low nibble first):
read from raw_data and int32_data, held one value a byte (pytrain.base.dtypes.INT4_NP), written back byte for
byte; QuantizeLinear / DequantizeLinear (opset 21 on) and com.microsoft GatherBlockQuantized on them equal
onnxruntime and onnx.reference (onnx's own int4 node cases run in tests/ops/test_onnx_node_suite.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytrain.base import dtypes
from pytrain.engine.runtime import InferenceSession
from pytrain.ops.quant.blocks import MS_DOMAIN
from pytrain.proto import TensorProto as PtTensor
from pytrain.proto.tensor import from_array, to_array

ml_dtypes = pytest.importorskip("ml_dtypes")
RANGE = {TensorProto.INT4: (-8, 7), TensorProto.UINT4: (0, 15)}


def _ints(elem, shape, seed):
    lo, hi = RANGE[elem]
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape)


def _tensor(name, elem, values):
    """An int4 / uint4 initializer as onnx writes it (raw_data, packed)."""
    return numpy_helper.from_array(values.astype(ml_dtypes.int4 if elem == TensorProto.INT4 else ml_dtypes.uint4),
                                   name)


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 10
    return model


def _oracles(model, feeds, names=None, reference=True):
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    # graph optimizations off: onnxruntime fuses DequantizeLinear(int4) -> MatMul into its own MatMulNBits, which
    # rounds the activations (0.03 here); the unfused graph is what the file says (onnx.reference agrees)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    out = [ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(names, feeds)]
    if reference:
        out.append(ReferenceEvaluator(model).run(names, feeds))
    return out


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), ()])
def test_read_and_written_back_byte_for_byte(elem, shape):
    v = _ints(elem, shape, 0)
    t = _tensor("w", elem, v)
    ours = PtTensor.FromString(t.SerializeToString())
    a = to_array(ours)
    assert a.dtype == dtypes.to_numpy(elem) and a.shape == shape
    np.testing.assert_array_equal(dtypes.four_bit_values(a), v)
    back = from_array(a, "w")
    assert back.data_type == elem and back.raw_data == t.raw_data and list(back.dims) == list(shape)
    # int32_data: one packed byte an int32 (onnx.helper.make_tensor's form)
    t32 = helper.make_tensor("w", elem, list(shape), v.reshape(-1).tolist())
    assert not t32.raw_data
    np.testing.assert_array_equal(dtypes.four_bit_values(to_array(PtTensor.FromString(t32.SerializeToString()))), v)


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4])
@pytest.mark.parametrize("axis,block", [(0, 0), (1, 0), (1, 16), (0, 4)])
def test_quantize_dequantize_int4_equal_onnxruntime_and_reference(elem, axis, block):
    """DequantizeLinear of an int4 weight (per axis or blocked, 4-bit zero points) and QuantizeLinear of an
    activation to int4 (the graph's output is int4): equal, integers bit for bit."""
    shape = (8, 33)
    blocks = list(shape)
    blocks[axis] = -(-shape[axis] // block) if block else shape[axis]
    if not block:
        blocks = [shape[axis]]
    rng = np.random.default_rng(1)
    scale = (rng.random(blocks) * 0.1 + 0.01).astype(np.float32)
    inits = [_tensor("w", elem, _ints(elem, shape, 2)), _tensor("zp", elem, _ints(elem, blocks, 3)),
             numpy_helper.from_array(scale, "s")]
    attrs = {"axis": axis, "block_size": block} if block else {"axis": axis}
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "zp"], ["wf"], **attrs),
             helper.make_node("Add", ["wf", "x"], ["xw"]),
             helper.make_node("QuantizeLinear", ["xw", "s", "zp"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], **attrs),
             helper.make_node("Cast", ["q"], ["q8"], to=TensorProto.INT8)]  # (onnxruntime returns no int4 array)
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info(n, t, shape) for n, t in (
                       ("wf", TensorProto.FLOAT), ("q8", TensorProto.INT8), ("y", TensorProto.FLOAT), ("q", elem))],
                   inits)
    feeds = {"x": (rng.standard_normal(shape) * 0.6).astype(np.float32)}
    got = InferenceSession(model.SerializeToString()).run(None, feeds)
    assert got[3].dtype == dtypes.to_numpy(elem)
    lo, hi = RANGE[elem]
    q = dtypes.four_bit_values(got[3])
    assert q.min() == lo and q.max() == hi   # saturates at the 4-bit range
    np.testing.assert_array_equal(got[1], q)
    for want in _oracles(model, feeds, ["wf", "q8", "y"]):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("shape,quantize_axis,gather_axis", [((5, 32), 1, 0), ((32, 6), 0, 1), ((4, 6, 40), 2, 0),
                                                             ((4, 33, 6), 1, -1)])
def test_gather_block_quantized_int4_equals_onnxruntime(elem, with_zp, shape, quantize_axis, gather_axis):
    """onnxruntime's int4 form: any gather and quantize axes, zero points of the data's type, 0 when absent."""
    blocks = list(shape)
    blocks[quantize_axis] = -(-shape[quantize_axis] // 16)
    rng = np.random.default_rng(4)
    inits = [_tensor("data", elem, _ints(elem, shape, 5)),
             numpy_helper.from_array(rng.random(blocks).astype(np.float32), "scales")]
    names = ["data", "idx", "scales"]
    if with_zp:
        inits.append(_tensor("zp", elem, _ints(elem, blocks, 6)))
        names.append("zp")
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain=MS_DOMAIN, gather_axis=gather_axis,
                            quantize_axis=quantize_axis, block_size=16)
    model = _model([node], [helper.make_tensor_value_info("idx", TensorProto.INT64, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    rows = shape[gather_axis]
    feeds = {"idx": np.array([[1, 0], [rows - 1, -1]], np.int64)}
    got = InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    (want,) = _oracles(model, feeds, reference=False)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_arithmetic_on_int4_fails_instead_of_computing_in_int8():
    """An op with no 4-bit meaning fails naming the node (numpy has no loop for the dtype), never wraps."""
    from pytrain.errors import PytrainError

    node = helper.make_node("Neg", ["w"], ["y"], name="neg4")
    model = _model([node], [], [helper.make_tensor_value_info("y", TensorProto.INT4, [3])],
                   [_tensor("w", TensorProto.INT4, np.array([-8, 1, 7]))])
    with pytest.raises(PytrainError, match="neg4"):
        InferenceSession(model.SerializeToString()).run(None, {})


@pytest.mark.parametrize("symmetric", [True, False])
def test_matmul_nbits_quantizer_qdq_form_equals_onnxruntime(symmetric):
    """MatMulNBitsQuantizer(quant_format=QDQ): a blocked DequantizeLinear of an int4 / uint4 weight feeding MatMul."""
    import logging

    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.ERROR)
    rng = np.random.default_rng(7)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 6])],
                   [numpy_helper.from_array(rng.standard_normal((40, 6)).astype(np.float32), "w")])
    q = MatMulNBitsQuantizer(model, algo_config=DefaultWeightOnlyQuantConfig(
        block_size=16, is_symmetric=symmetric, quant_format=QuantFormat.QDQ))
    q.process()
    quantized = q.model.model
    assert {t.data_type for t in quantized.graph.initializer} & {TensorProto.INT4, TensorProto.UINT4}
    assert "DequantizeLinear" in {n.op_type for n in quantized.graph.node}
    feeds = {"x": rng.standard_normal((3, 40)).astype(np.float32)}
    got = InferenceSession(quantized.SerializeToString()).run(None, feeds)[0]
    for want in _oracles(quantized, feeds):
        np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)


def test_a_fed_int4_input_is_range_checked():
    """Fed as integers (or onnx's ml_dtypes int4), an int4 input is checked against [-8, 7], never wrapped."""
    from pytrain.errors import InputError

    node = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    model = _model([node], [helper.make_tensor_value_info("q", TensorProto.INT4, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                   [numpy_helper.from_array(np.asarray(0.5, np.float32), "s")])
    sess = InferenceSession(model.SerializeToString())
    np.testing.assert_array_equal(sess.run(None, {"q": np.array([-8, 0, 7])})[0], [-4, 0, 3.5])
    np.testing.assert_array_equal(sess.run(None, {"q": np.array([-8, 0, 7]).astype(ml_dtypes.int4)})[0], [-4, 0, 3.5])
    with pytest.raises(InputError, match=r"input 'q' is int4: its values must be integers in \[-8, 7\]"):
        sess.run(None, {"q": np.array([8, 0, 0])})
