"""QuantizeLinear -> DequantizeLinear pairs on activations (static QDQ quantization, fake-quant exports) train:
the gradient is PyTorch's fake-quantize gradient (``torch.fake_quantize_per_tensor_affine`` /
``fake_quantize_per_channel_affine``'s backward: the straight-through estimator masked to the representable
range), the training model runs each pair as ``ai.pytrain.FakeQuantize``; scales and zero points stay frozen."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from pytrain.device.api import CheckpointState, Module, Optimizer  # noqa: E402
from pytrain.errors import ArtifactError, UnsupportedOpError  # noqa: E402
from pytrain.generator import artifacts  # noqa: E402

RANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _zero_point(zp: np.ndarray, four_bit: bool):
    """A zero point initializer; ``four_bit``: as int4 (TensorProto.INT4, opset 21)."""
    if not four_bit:
        return numpy_helper.from_array(zp, "zp")
    return helper.make_tensor("zp", TensorProto.INT4, list(zp.shape), zp.reshape(-1).tolist())


def _pair_model(zp: np.ndarray, scale: np.ndarray, axis: int, four_bit: bool = False):
    """loss = MSE(DequantizeLinear(QuantizeLinear(x @ W)), target): the pair on the activation ``x @ W``."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    attrs = {"axis": axis} if scale.ndim else {}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "s", "zp"], ["hq"], name="q", **attrs),
             helper.make_node("DequantizeLinear", ["hq", "s", "zp"], ["y"], name="dq", **attrs)]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(scale, "s"), _zero_point(zp, four_bit)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21 if four_bit else 17)])
    model.ir_version = 10
    return model, w


def _torch_fake_quant(h, scale: np.ndarray, zp: np.ndarray, axis: int, four_bit: bool = False):
    lo, hi = (-8, 7) if four_bit else RANGE[zp.dtype]
    if scale.ndim == 0:
        return torch.fake_quantize_per_tensor_affine(h, float(scale), int(zp), lo, hi)
    return torch.fake_quantize_per_channel_affine(h, torch.tensor(scale), torch.tensor(zp.astype(np.int32)),
                                                  axis, lo, hi)


# power-of-two scales: x / scale (ONNX) and x * (1 / scale) (PyTorch) round alike
@pytest.mark.parametrize("zp,scale,four_bit", [
    (np.asarray(128, np.uint8), np.asarray(2.0 ** -6, np.float32), False),
    (np.asarray(3, np.int8), np.asarray(2.0 ** -6, np.float32), False),
    (np.arange(5, dtype=np.int8) * 7 - 14, 2.0 ** -np.arange(4, 9, dtype=np.float32), False),
    (np.asarray(1, np.int8), np.asarray(0.5, np.float32), True)])   # int4: range [-8, 7]
def test_gradient_is_torchs_fake_quantize_gradient(zp, scale, four_bit):
    model, w = _pair_model(zp, scale, 1, four_bit)
    arts = artifacts.generate_artifacts(model.SerializeToString(), loss="MSELoss", optimizer=artifacts.SGD())
    assert arts.summary["trainable"] == ["W"]
    ops = {n.op_type for n in onnx.load_from_string(arts.training_model).graph.node}
    assert "FakeQuantize" in ops and "QuantizeLinear" not in ops
    rng = np.random.default_rng(1)
    x, t = (rng.standard_normal((4, 6)) * 3).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    loss = float(np.asarray(Module(arts.training_model, state, arts.eval_model)(x, t)))

    tx, tw = torch.tensor(x), torch.tensor(w, requires_grad=True)
    h = tx @ tw
    y = _torch_fake_quant(h, scale, zp, 1, four_bit)
    want = torch.nn.functional.mse_loss(y, torch.tensor(t))
    want.backward()
    lo, hi = (-8, 7) if four_bit else RANGE[zp.dtype]
    q = torch.round(h.detach() / torch.tensor(scale).reshape(-1) if scale.ndim else h.detach() / float(scale))
    inside = ((q + torch.tensor(zp.astype(np.float32)) >= lo) & (q + torch.tensor(zp.astype(np.float32)) <= hi))
    assert 0 < int(inside.sum()) < inside.numel()   # the mask matters: some values saturate
    np.testing.assert_allclose(loss, float(want.detach()), rtol=1e-5)
    np.testing.assert_allclose(state.parameters["W"].grad, tw.grad.numpy(), rtol=1e-5, atol=1e-6)


# ---- onnxruntime's quantize_static (QDQ) of a small MLP against PyTorch with fake_quantize at its scales ------
@pytest.fixture(scope="module")
def qdq_mlp(tmp_path_factory):
    """An MLP (MatMul, Add, Relu, MatMul, Add) quantized by ``quantize_static`` in QDQ format on its MatMuls, with
    a calibration reader of random data: int8 weights (DequantizeLinear), Q -> DQ pairs on every MatMul's input
    and output, float biases (which train)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    values = {"W1": rng.standard_normal((8, 16)) * 0.5, "b1": rng.standard_normal(16) * 0.1,
              "W2": rng.standard_normal((16, 3)) * 0.5, "b2": rng.standard_normal(3) * 0.1}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
             helper.make_node("Add", ["h3", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in values.items()])
    folder = tmp_path_factory.mktemp("qdq")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(folder / "mlp.onnx"))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((4, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(folder / "mlp.onnx"), str(folder / "qdq.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["MatMul"], activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return onnx.load(str(folder / "qdq.onnx"))


def _torch_forward(model, x, params):
    """The QDQ graph in PyTorch: each Q -> DQ pair as fake_quantize_per_tensor_affine at the file's scale and zero
    point, each DequantizeLinear of an initializer as its dequantized constant."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env = {"x": x}
    env.update(params)
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            q, s, z = (inits[i] for i in n.input)
            env[n.output[0]] = torch.tensor((q.astype(np.float32) - z.astype(np.float32)) * s)
        elif n.op_type == "QuantizeLinear":
            s, z = inits[n.input[1]], inits[n.input[2]]
            env[n.output[0]] = _torch_fake_quant(env[n.input[0]], s, z, 1)
        elif n.op_type == "DequantizeLinear":
            env[n.output[0]] = env[n.input[0]]   # the pair's second half (fake_quantize did both)
        else:
            a, b = (env[i] for i in n.input) if len(n.input) == 2 else (env[n.input[0]], None)
            env[n.output[0]] = {"MatMul": lambda: a @ b, "Add": lambda: a + b, "Relu": lambda: torch.relu(a)}[
                n.op_type]()
    return env["y"]


def test_static_qdq_model_trains_as_torch_with_fake_quantize(qdq_mlp):
    pairs = sum(n.op_type == "QuantizeLinear" for n in qdq_mlp.graph.node)
    assert pairs == 4
    arts = artifacts.generate_artifacts(qdq_mlp.SerializeToString(), loss="MSELoss", optimizer=artifacts.SGD())
    assert sorted(arts.summary["trainable"]) == ["b1", "b2"]   # int8 weights and the quantizers' scales are frozen
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.1)
    inits = {t.name: numpy_helper.to_array(t) for t in qdq_mlp.graph.initializer}
    params = {k: torch.tensor(inits[k], requires_grad=True) for k in ("b1", "b2")}
    rng = np.random.default_rng(2)
    x, t = (rng.standard_normal((6, 8)) * 1.5).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    ours, theirs = [], []
    for _ in range(5):
        module.train()
        ours.append(float(np.asarray(module(x, t))))
        opt.step()
        module.lazy_reset_grad()
        loss = torch.nn.functional.mse_loss(_torch_forward(qdq_mlp, torch.tensor(x), params), torch.tensor(t))
        loss.backward()
        with torch.no_grad():   # torch.optim.SGD's step, without importing torch.optim's machinery
            for p in params.values():
                p -= 0.1 * p.grad
                p.grad = None
        theirs.append(float(loss.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert ours[-1] < ours[0]
    for k in ("b1", "b2"):
        np.testing.assert_allclose(state.parameters[k].data, params[k].detach().numpy(), rtol=1e-5, atol=1e-6)


def test_scales_and_zero_points_stay_frozen_and_unpaired_quantizers_are_refused(qdq_mlp):
    blob = qdq_mlp.SerializeToString()
    with pytest.raises(ArtifactError, match="'h2_scale' would train, but it is the scale of QuantizeLinear"):
        artifacts.generate_artifacts(blob, loss="MSELoss", optimizer=artifacts.SGD(), requires_grad=["b1", "h2_scale"])
    # a pair whose halves use different scales is no fake quantization: refused naming the node
    model, _ = _pair_model(np.asarray(0, np.uint8), np.asarray(0.5, np.float32), 1)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(0.25, np.float32), "s2"))
    model.graph.node[2].input[1] = "s2"
    with pytest.raises(UnsupportedOpError, match=r"node 'dq' \(DequantizeLinear\).*same scale and zero point"):
        artifacts.generate_artifacts(model.SerializeToString(), loss="MSELoss", optimizer=artifacts.SGD())
