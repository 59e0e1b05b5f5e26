"""Checkpoint format and the ORT-named runtime API: round trips, corruption, nominal
checkpoints, gradient accumulation, the LR schedule, and clear errors on bad input."""
from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

from pytrain.generator import artifacts, models
from pytrain.device.api import CheckpointState, LinearLRScheduler, Module, Optimizer
from pytrain.errors import ArtifactError, CheckpointError, InputError, PytrainError
from train_helpers import train_steps


@pytest.fixture()
def setup():
    arts = artifacts.generate_artifacts(models.mlp(6, [5], 3, seed=1), optimizer=artifacts.AdamW(),
                                        additional_output_names=["output"])
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    opt = Optimizer(arts.optimizer_model, module)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8).astype(np.int64)
    return arts, state, module, opt, x, y


def _params(state):
    return {k: p.data.copy() for k, p in state.parameters.items()}


def test_checkpoint_round_trip_is_exact(setup, tmp_path):
    arts, state, module, opt, x, y = setup
    for _ in range(3):
        module(x, y)
        opt.step()
        module.lazy_reset_grad()
    state.properties["epoch"] = 2
    state.properties["best"] = 0.25
    state.properties["note"] = "ok"
    path = tmp_path / "ckpt"
    CheckpointState.save_checkpoint(state, path, include_optimizer_state=True)
    again = CheckpointState.load_checkpoint(str(path))
    for name, p in state.parameters.items():
        assert again.parameters[name].data.dtype == p.data.dtype
        np.testing.assert_array_equal(again.parameters[name].data, p.data)
        assert again.parameters[name].requires_grad == p.requires_grad
    assert dict(again.properties) == {"epoch": 2, "best": 0.25, "note": "ok"}
    assert again.optimizer_state.step == 3
    for pname, slots in state.optimizer_state.slots.items():
        for slot, arr in slots.items():
            np.testing.assert_array_equal(again.optimizer_state.slots[pname][slot], arr)
    assert again.to_bytes() == state.to_bytes()
    # the archive is inspectable with ordinary tools
    with zipfile.ZipFile(path) as z:
        assert "manifest.json" in z.namelist()


def test_resuming_from_a_checkpoint_continues_identically(setup):
    arts, state, module, opt, x, y = setup
    module(x, y); opt.step(); module.lazy_reset_grad()
    blob = state.to_bytes(include_optimizer_state=True)
    module(x, y); opt.step(); module.lazy_reset_grad()
    expected = _params(state)
    resumed = CheckpointState.load_checkpoint(blob)
    m2 = Module(arts.training_model, resumed, arts.eval_model)
    o2 = Optimizer(arts.optimizer_model, m2)
    m2(x, y); o2.step()
    for k, v in expected.items():
        np.testing.assert_array_equal(resumed.parameters[k].data, v)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupted_checkpoint_is_refused(setup, tmp_path, damage):
    state = setup[1]
    data = bytearray(state.to_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 3] ^= 0x55
    else:
        data = bytearray(b"not a checkpoint at all")
    path = tmp_path / "bad"
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="bad"):
        CheckpointState.load_checkpoint(str(path))


def test_save_is_atomic(setup, tmp_path, monkeypatch):
    state = setup[1]
    path = tmp_path / "ckpt"
    CheckpointState.save_checkpoint(state, path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    state.properties["x"] = 1
    with pytest.raises(OSError):
        CheckpointState.save_checkpoint(state, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_nominal_checkpoint_and_contiguous_buffers(setup):
    arts, state, module, opt, x, y = setup
    nominal = artifacts.generate_artifacts(models.mlp(6, [5], 3, seed=1), nominal_checkpoint=True)
    assert len(nominal.checkpoint) < len(arts.checkpoint)
    nstate = CheckpointState.load_checkpoint(nominal.checkpoint)
    assert nstate.nominal
    nmodule = Module(nominal.training_model, nstate, nominal.eval_model)
    with pytest.raises(CheckpointError, match="nominal"):
        nmodule(x, y)
    assert nmodule.get_parameters_size() == module.get_parameters_size() == 6 * 5 + 5 + 5 * 3 + 3
    nmodule.copy_buffer_to_parameters(module.get_contiguous_parameters(trainable_only=True))
    np.testing.assert_array_equal(nmodule(x, y), module(x, y)[0])
    with pytest.raises(InputError, match="buffer has 3 values"):
        nmodule.copy_buffer_to_parameters(np.zeros(3, np.float32))


def test_gradients_accumulate_until_lazy_reset(setup):
    arts, state, module, opt, x, y = setup
    module(x, y)
    g1 = state.parameters["fc1.weight"].grad.copy()
    module(x, y)  # no reset: ORT semantics add the new gradient
    np.testing.assert_allclose(state.parameters["fc1.weight"].grad, 2 * g1, rtol=1e-6)
    module.lazy_reset_grad()
    module(x, y)
    np.testing.assert_allclose(state.parameters["fc1.weight"].grad, g1, rtol=1e-6)


def test_train_and_eval_modes(setup):
    arts, state, module, opt, x, y = setup
    assert module.training
    assert module.input_names() == ["input", "labels"]
    assert module.output_names() == ["loss", "output"]
    before = _params(state)
    module.eval()
    assert not module.training
    loss, logits = module(x, y)
    assert logits.shape == (8, 3) and loss.shape == ()
    assert all(state.parameters[k].grad is None for k in before)
    module.train()
    module(x, y)
    opt.step()
    assert any(not np.array_equal(before[k], state.parameters[k].data) for k in before)


def test_linear_lr_scheduler_arguments_mean_what_they_say(setup):
    opt = setup[3]
    sched = LinearLRScheduler(opt, warmup_step_count=4, total_step_count=12, initial_lr=0.1)
    lrs = [opt.get_learning_rate()]
    for _ in range(12):
        sched.step()
        lrs.append(opt.get_learning_rate())
    expected = [0.0, 0.025, 0.05, 0.075, 0.1, 0.0875, 0.075, 0.0625, 0.05, 0.0375, 0.025, 0.0125, 0.0]
    np.testing.assert_allclose(lrs, expected, atol=1e-12)
    with pytest.raises(InputError):
        LinearLRScheduler(opt, warmup_step_count=20, total_step_count=10, initial_lr=0.1)


def test_bad_inputs_to_module(setup):
    arts, state, module, opt, x, y = setup
    with pytest.raises(InputError, match=r"input 'input' expects shape float32 \[N, 6\], got \[8, 5\] \(axis 1\)"):
        module(x[:, :5], y)
    with pytest.raises(InputError, match="takes 2 inputs"):
        module(x)
    with pytest.raises(InputError, match="'input' expects float32"):
        module(x.astype(str), y)
    with pytest.raises(InputError, match="must agree on dimension 'N'"):
        module(x, y[:5])


def test_bad_generation_arguments():
    m = models.mlp(6, [5], 3)
    with pytest.raises(ArtifactError, match="'nope', which is not an initializer"):
        artifacts.generate_artifacts(m, requires_grad=["nope"])
    with pytest.raises(ArtifactError, match="both name 'fc1.weight'"):
        artifacts.generate_artifacts(m, requires_grad=["fc1.weight"], frozen_params=["fc1.weight"])
    with pytest.raises(ArtifactError, match="'missing', which no node"):
        artifacts.generate_artifacts(m, additional_output_names=["missing"])
    with pytest.raises(PytrainError, match="not a valid ONNX"):
        artifacts.generate_artifacts(m.SerializeToString()[:50])


def test_trainable_ops_trains_only_the_last_layers():
    arts = artifacts.generate_artifacts(models.mlp(6, [5, 4], 3), trainable_ops=1)
    assert arts.summary["trainable"] == ["fc3.weight", "fc3.bias"]
    assert set(arts.summary["frozen"]) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    arts2 = artifacts.generate_artifacts(models.mlp(6, [5, 4], 3), trainable_ops=2)
    assert arts2.summary["trainable"] == ["fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]


def test_unsupported_op_is_named_at_generation():
    import onnx
    from onnx import helper as oh

    g = oh.make_graph([oh.make_node("Det", ["x"], ["y"], name="weird")], "g",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(PytrainError, match=r"'weird' \(Det\).*supported: .*Gemm"):
        artifacts.generate_artifacts(m)


def test_artifacts_written_to_directory(tmp_path):
    arts = artifacts.generate_artifacts(models.mlp(6, [5], 3), artifact_directory=tmp_path, prefix="m_")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "m_checkpoint", "m_eval_model.onnx", "m_optimizer_model.onnx", "m_training_model.onnx"]
    assert (tmp_path / "m_checkpoint").read_bytes() == arts.checkpoint
    state = CheckpointState.load_checkpoint(str(tmp_path / "m_checkpoint"))
    module = Module(str(tmp_path / "m_training_model.onnx"), state, str(tmp_path / "m_eval_model.onnx"))
    Optimizer(str(tmp_path / "m_optimizer_model.onnx"), module)


def test_dropout_masks_resume_exactly():
    """Dropout draws its masks from (seed, step), the step kept in the checkpoint."""
    import onnx
    from onnx import helper as oh
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    g = oh.make_graph(
        [oh.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
         oh.make_node("Dropout", ["h", "ratio"], ["d"]),
         oh.make_node("Gemm", ["d", "w2", "b2"], ["output"], transB=1)], "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 6])],
        [oh.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w"),
         numpy_helper.from_array(np.zeros(8, np.float32), "b"),
         numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
         numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "w2"),
         numpy_helper.from_array(np.zeros(3, np.float32), "b2")])
    arts = artifacts.generate_artifacts(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]),
                                        optimizer=artifacts.SGD())
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.integers(0, 3, 16).astype(np.int64)

    def run(state, steps):
        return train_steps(arts, [(x, y)] * steps, state=state)[0]

    full_state = CheckpointState.load_checkpoint(arts.checkpoint)
    full = run(full_state, 6)
    assert len(set(full)) > 1
    half = CheckpointState.load_checkpoint(arts.checkpoint)
    first = run(half, 3)
    resumed = CheckpointState.load_checkpoint(half.to_bytes(include_optimizer_state=True))
    assert first + run(resumed, 3) == full
    for k, p in full_state.parameters.items():
        np.testing.assert_array_equal(resumed.parameters[k].data, p.data)


def test_same_state_same_bytes():
    """Checkpoints are deterministic, so caches and hashes of them stay valid across builds."""
    import time

    a = artifacts.generate_artifacts(models.mlp(6, [5], 3, seed=1)).checkpoint
    time.sleep(2.1)  # zip timestamps have a 2-second resolution
    assert artifacts.generate_artifacts(models.mlp(6, [5], 3, seed=1)).checkpoint == a


@pytest.mark.parametrize("optimizer", [artifacts.AdamW(), artifacts.SGD(momentum=0.9), artifacts.SGD()])
def test_one_update_node_for_all_parameters_equals_one_node_per_parameter(optimizer):
    """The optimizer model updates every parameter in one multi-tensor node; an optimizer model
    with one node per parameter (how earlier pytrain versions wrote it) trains identically."""
    from pytrain.proto import make_node
    from pytrain.engine.validate import load_model

    arts = artifacts.generate_artifacts(models.mlp(6, [5], 3, seed=1), optimizer=optimizer)
    opt_model = load_model(arts.optimizer_model)
    (update,) = [n for n in opt_model.graph.node if n.name == "update"]
    assert len(opt_model.graph.node) == 1
    group = 2 + len(optimizer.state_names)  # param, grad and the optimizer's state per parameter
    # the same update split into one node per parameter
    split = load_model(arts.optimizer_model)
    del split.graph.node[:]
    ins, outs = list(update.input), list(update.output)
    n_out = group - 1
    for k in range((len(ins) - 2) // group):
        node = make_node(update.op_type, ins[:2] + ins[2 + k * group: 2 + (k + 1) * group],
                         outs[k * n_out:(k + 1) * n_out], name="update/%d" % k, domain=update.domain)
        node.attribute.extend(update.attribute)
        split.graph.node.append(node)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int64))] * 3
    results = []
    for model in (arts.optimizer_model, split):
        state = CheckpointState.load_checkpoint(arts.checkpoint)
        module = Module(arts.training_model, state, arts.eval_model)
        opt = Optimizer(model, module)
        for x, y in batches:
            module(x, y)
            opt.step()
            module.lazy_reset_grad()
        results.append(_params(state))
    for k in results[0]:
        np.testing.assert_array_equal(results[0][k], results[1][k])


def test_update_node_with_a_broken_input_group_is_named():
    from pytrain.ops import OpContext, get_kernel
    from pytrain.ops.registry import PYTRAIN_DOMAIN
    from pytrain.errors import GraphError

    p = np.zeros(3, np.float32)
    with pytest.raises(GraphError, match="AdamStep node 'upd'.*groups of 4 \\(param, grad, m, v\\), got 3"):
        get_kernel("AdamStep", PYTRAIN_DOMAIN).fn(OpContext(node_name="upd"), np.float32(0.1), np.int64(1), p, p, p)
