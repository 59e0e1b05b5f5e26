"""Small models written the way converters write pretrained files (old opsets, Constant-node weights,
``-1``/``?`` dims, control flow), and the check the wild-file tests share: inference equals
onnxruntime, 5 SGD steps equal the same function trained in torch, the export runs in onnxruntime."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module, Optimizer
from pytrain.engine.runtime import InferenceSession

STEPS, LR = 5, 0.1


def model(nodes, inputs, outputs, inits: Dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    """A model of ``nodes`` at ``opset``; ``inputs``/``outputs`` are (name, elem type, shape)."""
    g = helper.make_graph(nodes, "wild", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset < 14 else 8
    return m


def ort_run(m: "onnx.ModelProto | bytes", feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    data = m if isinstance(m, bytes) else m.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def batches(n_in, n_classes: int, batch: int = 4, seed: int = 1, steps: int = STEPS):
    """``steps`` (x, label) batches; ``n_in`` an int (x is (batch, n_in)) or a shape after the batch."""
    rng = np.random.default_rng(seed)
    shape = (batch,) + (tuple(n_in) if isinstance(n_in, (tuple, list)) else (n_in,))
    return [(rng.standard_normal(shape).astype(np.float32),
             rng.integers(0, n_classes, batch).astype(np.int64)) for _ in range(steps)]


def torch_sgd(forward: Callable, params: Dict[str, np.ndarray], data) -> tuple:
    """Losses and final weights of plain SGD on cross-entropy over ``forward(params, x)``."""
    ps = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.SGD(list(ps.values()), lr=LR)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(ps, torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in ps.items()}


def check_wild(m: onnx.ModelProto, forward: Callable, params: Dict[str, np.ndarray], data,
               output: str = "logits", input_name: str = "x", rtol: float = 1e-4) -> onnx.ModelProto:
    """Inference equals onnxruntime; 5 SGD steps equal torch (losses and the ``params`` weights, by
    name); the exported inference model runs in onnxruntime and gives pytrain's outputs (returned)."""
    blob = m.SerializeToString()
    x0 = data[0][0]
    got = InferenceSession(blob).run([output], {input_name: x0})[0]
    np.testing.assert_allclose(got, ort_run(blob, {input_name: x0})[0], rtol=1e-4, atol=1e-5)

    arts = artifacts.generate_artifacts(blob, optimizer=artifacts.SGD(), requires_grad=None)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    trained = sorted(n for n, p in state.parameters.items() if p.requires_grad)
    assert trained == sorted(params), trained
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(LR)
    losses = []
    for x, y in data:
        out = module(x, y)
        losses.append(float(out[0] if isinstance(out, list) else out))
        opt.step()
        module.lazy_reset_grad()
    ref_losses, ref_params = torch_sgd(forward, params, data)
    np.testing.assert_allclose(losses, ref_losses, rtol=rtol, atol=1e-5)
    for k, v in ref_params.items():
        np.testing.assert_allclose(state.parameters[k].data, v, rtol=rtol, atol=1e-5, err_msg=k)

    exported = module.export_model_for_inferencing(None, [output])
    ours = InferenceSession(exported).run([output], {input_name: x0})[0]
    np.testing.assert_allclose(ort_run(exported, {input_name: x0})[0], ours, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        ref = forward({k: torch.from_numpy(v) for k, v in ref_params.items()}, torch.from_numpy(x0)).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-4)
    return onnx.load_from_string(exported)


def weights(shapes: Dict[str, Sequence[int]], seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in shapes.items()}


FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def script_export(module: "torch.nn.Module", example: np.ndarray, opset: int) -> onnx.ModelProto:
    """``torch.jit.script(module)`` exported by TorchScript's exporter (its If/Loop come from Python's
    if/for), input ``x`` with a dynamic batch, output ``logits``."""
    import io
    import warnings

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), (torch.from_numpy(example),), f, input_names=["x"],
                          output_names=["logits"], opset_version=opset, dynamo=False,
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    return onnx.load_from_string(f.getvalue())
