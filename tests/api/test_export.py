"""Export for inference: standard ops only, Dropout gone, BatchNorm on running statistics,
trained weights baked in, conservative IR/opset; onnxruntime agrees with pytrain and torch."""
from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module, Optimizer

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch_models import export, sync_from_onnx, torch_steps  # noqa: E402


class BNDropNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.0)  # ratio 0 keeps the torch comparison deterministic
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def _train_both(steps=10):
    torch.manual_seed(0)
    model = BNDropNet()
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int64))
               for _ in range(steps)]
    data = export(copy.deepcopy(model), torch.from_numpy(batches[0][0][:2]))
    sync_from_onnx(model, data)
    torch_steps(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), batches)
    arts = artifacts.generate_artifacts(data, optimizer=artifacts.SGD(momentum=0.9))
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    opt.set_learning_rate(0.1)
    for x, y in batches:
        module(x, y)
        opt.step()
        module.lazy_reset_grad()
    return model, module, data


def test_export_matches_torch_eval_and_onnxruntime(tmp_path):
    model, module, source = _train_both()
    assert any(n.op_type == "Dropout" for n in onnx.load_from_string(source).graph.node)
    path = tmp_path / "inference.onnx"
    data = module.export_model_for_inferencing(str(path), ["output"])
    assert path.read_bytes() == data
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    assert {n.domain for n in m.graph.node} <= {""}
    assert "Dropout" not in {n.op_type for n in m.graph.node}
    assert m.ir_version <= 9 and m.opset_import[0].version <= 17
    assert [i.name for i in m.graph.input] == ["input"]
    x = np.random.default_rng(5).standard_normal((6, 1, 8, 8)).astype(np.float32)
    got = ort.InferenceSession(data).run(None, {"input": x})[0]
    model.eval()
    want = model(torch.from_numpy(x)).detach().numpy()  # eval mode: BN on running statistics
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def _single_op_model(opset: int, use_reduce_mean_input: bool):
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]), oh.make_node("Relu", ["h"], ["y"])]
    inits = [w]
    if use_reduce_mean_input:  # opset 18 moved ReduceMean's axes to an input
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
        nodes.append(oh.make_node("ReduceMean", ["y", "axes"], ["z"], keepdims=1))
        out = "z"
    else:
        out = "y"
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
                      [oh.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None)], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)]), out


@pytest.mark.parametrize("opset,needs_input_axes,expected_opset", [(21, False, 14), (18, True, 18)])
def test_declared_opset_is_the_oldest_that_keeps_the_meaning(opset, needs_input_axes, expected_opset):
    model, out = _single_op_model(opset, needs_input_axes)
    arts = artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss, loss_input_names=[out])
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    data = module.export_model_for_inferencing(None, [out])
    m = onnx.load_from_string(data)
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == expected_opset
    assert m.ir_version == {14: 7, 18: 8}[expected_opset]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    module.eval()
    ours = module(x, np.zeros((2, 2) if not needs_input_axes else (2, 1), np.float32))
    got = ort.InferenceSession(data).run(None, {"x": x})[0]
    ref = np.maximum(x @ np.ones((3, 2), np.float32), 0)
    if needs_input_axes:
        ref = ref.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert np.isfinite(ours)


def test_export_errors_name_the_problem():
    model, module, _ = _train_both(steps=1)
    from pytrain.errors import ArtifactError

    with pytest.raises(ArtifactError, match="'nope'"):
        module.export_model_for_inferencing(None, ["nope"])
    with pytest.raises(ArtifactError, match="label"):
        module.export_model_for_inferencing(None, ["loss"])


def test_standardization_baked_into_the_model():
    """models.with_standardization: the model computes (x - mean) / std first, so the exported
    model takes raw features; the statistics stay frozen while the rest trains."""
    from pytrain.generator import models

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((32, 4)) * [1, 10, 100, 0.1] + [5, -3, 50, 0]).astype(np.float32)
    mean, std = x.mean(axis=0), x.std(axis=0)
    base = models.mlp(4, [6], 3, seed=2)
    model, stats = models.with_standardization(base, mean, std)
    arts = artifacts.generate_artifacts(model, frozen_params=stats)
    assert sorted(arts.summary["frozen"]) == sorted(stats)
    module = Module(arts.training_model, CheckpointState.load_checkpoint(arts.checkpoint), arts.eval_model)
    exported = module.export_model_for_inferencing(None, ["output"])
    got = ort.InferenceSession(exported).run(None, {"input": x})[0]
    want = ort.InferenceSession(base.SerializeToString()).run(None, {"input": (x - mean) / std})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_schema_versions_table_matches_onnx_for_every_supported_op():
    """pytrain/base/opset_versions.py (used by the exporter and by model validation) is onnx.defs' history."""
    import onnx.defs

    from pytrain.base.opset_versions import SCHEMA_VERSIONS
    from pytrain.ops import supported_ops

    history = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain == "":
            history.setdefault(s.name, set()).add(s.since_version)
    for op in supported_ops():
        assert SCHEMA_VERSIONS.get(op) == tuple(sorted(history[op])), op
