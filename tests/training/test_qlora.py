"""Quantized models as transformers.js ships them, and LoRA on them (QLoRA-style; docs/quantized.md).

A tiny GPT-2 (``pytrain.torch_export``, the session's ``lm``) quantized as transformers.js' q8 files are
(``quantize_dynamic(weight_type=QInt8, MatMulConstBOnly)``: DynamicQuantizeLinear -> MatMulInteger blocks) and as
q4 (onnxruntime's MatMul4BitsQuantizer, symmetric 4-bit blocks of 16: MatMulNBits; its Gemm layers written as
MatMul + Add first, since the quantizer takes MatMul only; the token table stays float: quantized, it becomes a
GatherBlockQuantized of int4 data, an element type pytrain refuses by name).

* Inference equals onnxruntime. For q8 the exact oracle is onnxruntime on the same file with each MatMulInteger
  written as an int32 MatMul: onnxruntime's own AVX2 uint8 x int8 kernel saturates int16 pair sums
  (tests/ops/test_quantization_ops.py), so against plain onnxruntime the logits differ by what a few saturated
  sums and the activation roundings they flip move (measured < 2% of the logits' range here).
* LoRA on the quantized base lowers the loss; the base stays quantized (its int8 / packed bytes untouched); the
  adapter gradient through the dequantized weights equals the gradient LoRA takes on the float model holding
  those dequantized weights, within what the activations' rounding moves (straight-through).
* The exports: adapters kept as nodes run in onnxruntime with pytrain's own logits; merged into float layers;
  merged and requantized (distances from the float merge measured and bounded)."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pytrain import artifacts  # noqa: E402
from pytrain.api import CheckpointState, Module, Optimizer  # noqa: E402
from pytrain.lora import LoRA  # noqa: E402
from pytrain.losses import CausalLMLoss  # noqa: E402
from pytrain.runtime import InferenceSession  # noqa: E402

TARGETS = ["c_attn", "c_proj", "c_fc"]   # every quantized layer of the tiny GPT-2
BATCH = 2


def _ids(seed: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, vocab, (BATCH, 16)).astype(np.int64)


def gemm_as_matmul(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """Each Gemm(x, W, b) (alpha = beta = 1, no transposes) as MatMul(x, W) + b, as a MatMul exporter writes it."""
    nodes = []
    for n in model.graph.node:
        if n.op_type != "Gemm":
            nodes.append(n)
            continue
        assert all(a.name in ("alpha", "beta") and a.f == 1.0 for a in n.attribute), n.name
        mid = n.output[0] + "_mm"
        nodes += [helper.make_node("MatMul", n.input[:2], [mid], name=n.name.replace("Gemm", "MatMul")),
                  helper.make_node("Add", [mid, n.input[2]], [n.output[0]], name=n.name.replace("Gemm", "Add"))]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def exact_integer_matmuls(model: "onnx.ModelProto") -> bytes:
    """The model with each MatMulInteger as Cast-to-int32, Sub of the zero points, int32 MatMul: what the spec
    computes, which onnxruntime then runs without its saturating kernel."""
    nodes = []
    for n in model.graph.node:
        if n.op_type != "MatMulInteger":
            nodes.append(n)
            continue
        sides = []
        for k in (0, 1):
            c = n.output[0] + "_i%d" % k
            nodes.append(helper.make_node("Cast", [n.input[k]], [c], to=TensorProto.INT32))
            if len(n.input) > k + 2 and n.input[k + 2]:
                z = c + "_zp"
                nodes.append(helper.make_node("Cast", [n.input[k + 2]], [z], to=TensorProto.INT32))
                nodes.append(helper.make_node("Sub", [c, z], [c + "_c"]))
                c += "_c"
            sides.append(c)
        nodes.append(helper.make_node("MatMul", sides, [n.output[0]], name=n.name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def models(lm, tmp_path_factory):
    """{"f32", "q8", "q4"}: the tiny GPT-2's bytes, float and quantized as transformers.js' files are."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    d = tmp_path_factory.mktemp("quantized")
    f32 = os.path.join(d, "model.onnx")
    with open(f32, "wb") as f:
        f.write(lm.onnx)
    quantize_dynamic(f32, os.path.join(d, "q8.onnx"), weight_type=QuantType.QInt8,
                     extra_options={"MatMulConstBOnly": True})
    q = MatMulNBitsQuantizer(gemm_as_matmul(onnx.load_from_string(lm.onnx)), algo_config=DefaultWeightOnlyQuantConfig(
        block_size=16, is_symmetric=True, op_types_to_quantize=("MatMul",)))
    q.process()
    with open(os.path.join(d, "q8.onnx"), "rb") as f:
        q8 = f.read()
    return {"f32": lm.onnx, "q8": q8, "q4": q.model.model.SerializeToString(), "vocab": lm.vocab_size}


def ort_run(blob: bytes, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _ops(blob: bytes):
    return {(n.domain, n.op_type) for n in onnx.load_from_string(blob).graph.node}


# ---- inference ----------------------------------------------------------------------------------------------
def test_quantized_files_hold_the_quantized_ops(models):
    assert {("", "DynamicQuantizeLinear"), ("", "MatMulInteger"), ("", "DequantizeLinear")} <= _ops(models["q8"])
    assert ("com.microsoft", "MatMulNBits") in _ops(models["q4"])


def test_q8_inference_equals_onnxruntime(models):
    exact = exact_integer_matmuls(onnx.load_from_string(models["q8"]))
    worst = 0.0
    for seed in range(3):
        feeds = {"input_ids": _ids(seed, models["vocab"])}
        got = InferenceSession(models["q8"]).run(None, feeds)[0]
        np.testing.assert_allclose(got, ort_run(exact, feeds), rtol=1e-5, atol=1e-5)
        plain = ort_run(models["q8"], feeds)
        worst = max(worst, float(np.abs(got - plain).max() / np.ptp(plain)))
    assert worst < 0.02, worst


def test_q4_inference_equals_onnxruntime(models):
    for seed in range(2):
        feeds = {"input_ids": _ids(seed, models["vocab"])}
        np.testing.assert_allclose(InferenceSession(models["q4"]).run(None, feeds)[0], ort_run(models["q4"], feeds),
                                   rtol=1e-5, atol=1e-5)
