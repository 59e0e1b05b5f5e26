"""Old opsets' forms of ops whose inputs were once attributes, trained: Slice-1 (starts/ends/axes
attributes) and Pad-2 (pads/value attributes, constant and reflect modes). 5 SGD steps equal the same
function in torch, the export (at the model's opset) runs in onnxruntime with pytrain's outputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from onnx import helper  # noqa: E402
from wild_models import FLOAT, batches, check_wild, model, weights  # noqa: E402

N_IN, N_CLS = 6, 5


@pytest.mark.parametrize("opset", [9])
def test_slice_1_and_pad_2_attributes_train(opset):
    p = weights({"W1": (N_IN, 8), "W2": (11, N_CLS)})
    I = helper.make_node
    nodes = [I("MatMul", ["x", "W1"], ["h"]),
             I("Slice", ["h"], ["s"], starts=[1], ends=[-1], axes=[1]),                # (N, 6)
             I("Pad", ["s"], ["pc"], pads=[0, 1, 0, 2], mode="constant", value=0.5),  # (N, 9)
             I("Pad", ["pc"], ["pr"], pads=[0, 1, 0, 1], mode="reflect"),             # (N, 11)
             I("MatMul", ["pr", "W2"], ["logits"])]
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], p, opset)
    m.ir_version = 3

    def forward(ps, x):
        s = (x @ ps["W1"])[:, 1:-1]
        pc = torch.nn.functional.pad(s, (1, 2), value=0.5)
        pr = torch.nn.functional.pad(pc[None], (1, 1), mode="reflect")[0]
        return pr @ ps["W2"]

    check_wild(m, forward, p, batches(N_IN, N_CLS))


def test_opset_6_broadcast_axis_trains():
    """Gemm-6 with broadcast, Mul/Add/Sub/Div-6 with broadcast=1 and axis (B matched to A's dims from axis):
    inference and 5 SGD steps equal torch running the spec's meaning (onnxruntime runs these ops from opset 7)."""
    import numpy as np

    from pytrain.device.api import CheckpointState, Module, Optimizer
    from pytrain.engine.runtime import InferenceSession
    from pytrain.generator import artifacts
    from wild_models import LR, torch_sgd

    p = weights({"W1": (N_IN, 8), "b1": (8,), "s": (2,), "t": (2, 4), "u": (4,), "W2": (8, N_CLS)})
    p["d"] = np.array([1.5, 0.75], np.float32)
    I = helper.make_node
    nodes = [I("Gemm", ["x", "W1", "b1"], ["h"], broadcast=1), I("Reshape", ["h", "shape3"], ["h3"]),
             I("Mul", ["h3", "s"], ["m"], broadcast=1, axis=1), I("Add", ["m", "t"], ["a"], broadcast=1, axis=1),
             I("Sub", ["a", "u"], ["su"], broadcast=1), I("Div", ["su", "d"], ["dv"], broadcast=1, axis=1),
             I("Reshape", ["dv", "shape2"], ["h2"]), I("MatMul", ["h2", "W2"], ["logits"])]
    consts = {"shape3": np.array([-1, 2, 4], np.int64), "shape2": np.array([-1, 8], np.int64)}
    m = model(nodes, [("x", FLOAT, ["N", N_IN])], [("logits", FLOAT, ["N", N_CLS])], dict(p, **consts), 6)
    m.ir_version = 3

    def forward(ps, x):
        h3 = (x @ ps["W1"] + ps["b1"]).reshape(-1, 2, 4)
        out = (h3 * ps["s"].view(2, 1) + ps["t"] - ps["u"]) / ps["d"].view(2, 1)
        return out.reshape(-1, 8) @ ps["W2"]

    data = batches(N_IN, N_CLS)
    blob = m.SerializeToString()
    with torch.no_grad():
        want = forward({k: torch.from_numpy(v) for k, v in p.items()}, torch.from_numpy(data[0][0])).numpy()
    np.testing.assert_allclose(InferenceSession(blob).run(None, {"x": data[0][0]})[0], want, rtol=1e-5, atol=1e-6)
    arts = artifacts.generate_artifacts(blob, optimizer=artifacts.SGD(), requires_grad=list(p))
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(LR)
    losses = []
    for x, y in data:
        losses.append(float(module(x, y)))
        opt.step()
        module.lazy_reset_grad()
    ref_losses, ref_params = torch_sgd(forward, p, data)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-5)
    for k, v in ref_params.items():
        np.testing.assert_allclose(state.parameters[k].data, v, rtol=1e-4, atol=1e-5, err_msg=k)
