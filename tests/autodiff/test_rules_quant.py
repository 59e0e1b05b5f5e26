"""Gradient rules of the quantized matmuls (QLoRA, docs/quantized.md) through the artifact generator, against
float64 finite differences of the float model ``x @ dequant(W)`` (the straight-through gradient: the
activation's rounding is a step function, so the finite differences of the quantized forward are not the
oracle; tests/helpers/grad_harness.py's ``oracle``)."""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np
from onnx import TensorProto

from grad_harness import Case, node, rand, with_loss

from pytrain.ops.quant.blocks import MS_DOMAIN, NBitsLayout, nbits_dequantize, nbits_quantize
from pytrain.ops.quant.op_quantized_matmul_training import int8_dequantize


def _weighted_sum(y: np.ndarray, seed: int = 0) -> float:
    # with_loss's loss: sum(out * R) with R drawn from default_rng(seed) in the output's shape
    return float((y * np.random.default_rng(seed).standard_normal(y.shape)).sum())


def _int8_block() -> List[Case]:
    w = np.random.default_rng(5).integers(-127, 128, size=(5, 3)).astype(np.int8)
    ws, wzp = np.asarray(0.02, np.float32), np.asarray(0, np.int8)
    nodes = [node("Cast", ["X"], ["x32"], to=TensorProto.FLOAT),
             node("DynamicQuantizeLinear", ["x32"], ["xq", "xs", "xzp"]),
             node("MatMulInteger", ["xq", "W", "xzp", "WZ"], ["yi"]),
             node("Cast", ["yi"], ["yf"], to=TensorProto.FLOAT),
             node("Mul", ["xs", "WS"], ["s"]),
             node("Mul", ["yf", "s"], ["y32"]),
             node("Cast", ["y32"], ["Y"], to=TensorProto.DOUBLE)]
    deq = int8_dequantize(w, ws, wzp).astype(np.float64)
    return [Case("q8 block (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul)", nodes,
                 {"X": rand(2, 4, 5), "W": w, "WS": ws, "WZ": wzp}, ["Y"], params=["X"],
                 oracle=lambda v: _weighted_sum(v["X"] @ deq))]


def _matmul_nbits() -> List[Case]:
    lay = NBitsLayout(20, 3, 4, 16)
    B, s, zp = nbits_quantize(np.random.default_rng(6).standard_normal((3, 20)).astype(np.float32), lay, False)
    s = s.astype(np.float64)
    deq = nbits_dequantize(B, s, zp, lay)
    mm = node("MatMulNBits", ["A", "B", "S", "Z", "", "bias"], K=20, N=3, bits=4, block_size=16)
    mm.domain = MS_DOMAIN
    return [Case("MatMulNBits 4-bit with zero points and bias", [mm],
                 {"A": rand(2, 20), "B": B, "S": s, "Z": zp, "bias": rand(3)}, ["Y"], params=["A"],
                 oracle=lambda v: _weighted_sum(v["A"] @ deq.T + v["bias"]))]


CASES: Dict[str, Callable[[], List[Case]]] = {
    "ai.pytrain.DynamicQuantMatMul": _int8_block,
    "com.microsoft.MatMulNBits": _matmul_nbits,
}


def _dequant_matmul() -> List[Case]:
    w = np.random.default_rng(7).integers(0, 256, size=(4, 3)).astype(np.uint8)
    s, zp = np.asarray(0.01), np.asarray(128, np.uint8)
    deq = (w.astype(np.float64) - 128) * 0.01
    plain = [node("DequantizeLinear", ["W", "S", "Z"], ["w"]), node("MatMul", ["X", "w"])]
    tied = [node("Transpose", ["W"], ["wt"], perm=[1, 0]), node("DequantizeLinear", ["wt", "S", "Z"], ["w"]),
            node("MatMul", ["X", "w"])]
    return [Case("MatMul by DequantizeLinear(W)", plain, {"X": rand(2, 3, 4), "W": w, "S": s, "Z": zp}, ["Y"],
                 params=["X"], oracle=lambda v: _weighted_sum(v["X"] @ deq)),
            Case("MatMul by DequantizeLinear(Transpose(W)) (a tied lm_head)", tied,
                 {"X": rand(2, 3), "W": w, "S": s, "Z": zp}, ["Y"], params=["X"],
                 oracle=lambda v: _weighted_sum(v["X"] @ deq.T))]


CASES["ai.pytrain.DequantMatMul"] = _dequant_matmul


def test_training_model_holds_no_float_copy_of_a_dequantized_weight():
    """The fused forms are what the training model runs: no DequantizeLinear output lives until the backward pass,
    and a q8 block has no integer tensor on the gradient's path."""
    import onnx

    from pytrain.generator import artifacts

    for case in _dequant_matmul() + _int8_block():
        arts = artifacts.generate_artifacts(with_loss(case).SerializeToString(), requires_grad=["X"], loss=None,
                                            optimizer=artifacts.OptimType.SGD)
        ops = {n.op_type for n in onnx.load_from_string(arts.training_model).graph.node}
        assert "DequantizeLinear" not in ops and "MatMulInteger" not in ops, (case.name, sorted(ops))
        assert ops & {"DequantMatMul", "DynamicQuantMatMul"}, case.name


def _fake_quant() -> List[Case]:
    """QuantizeLinear -> DequantizeLinear of one scale (FakeQuantize in the training model): PyTorch's fake-quantize
    gradient, ``dy * mask`` with the mask of the representable range fixed at X (some values saturate)."""
    cases = []
    for name, s, zp, axis in [("per tensor uint8", np.asarray(0.01, np.float32), np.asarray(128, np.uint8), 1),
                              ("per axis int8", np.asarray([0.004, 0.01, 0.02], np.float32),
                               np.asarray([-20, 0, 9], np.int8), 1)]:
        nodes = [node("Cast", ["X"], ["x32"], to=TensorProto.FLOAT),
                 node("QuantizeLinear", ["x32", "S", "Z"], ["q"], axis=axis),
                 node("DequantizeLinear", ["q", "S", "Z"], ["y32"], axis=axis),
                 node("Cast", ["y32"], ["Y"], to=TensorProto.DOUBLE)]
        x = rand(4, 3, lo=-2.0, hi=2.0)
        lo, hi = (0, 255) if zp.dtype == np.uint8 else (-128, 127)
        r = np.rint(x.astype(np.float32) / s) + zp.astype(np.float32)
        mask = (r >= lo) & (r <= hi)
        assert 0 < mask.sum() < mask.size
        cases.append(Case("Q -> DQ pair, %s" % name, nodes, {"X": x, "S": s, "Z": zp}, ["Y"], opset=13,
                          params=["X"], oracle=lambda v, m=mask: _weighted_sum(v["X"] * m)))
    return cases


# the Q and DQ rules pass a gradient only as a pair (FakeQuantize), and refuse otherwise (tests/training/
# test_fake_quant.py)
CASES["ai.pytrain.FakeQuantize"] = CASES["QuantizeLinear"] = CASES["DequantizeLinear"] = _fake_quant
