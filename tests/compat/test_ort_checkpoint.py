"""Checkpoints written by ONNX Runtime 1.19.2 load in pytrain (pytrain.checkpoint.ort_format).

The fixtures in tests/compat/fixtures/ort_checkpoints/ come from make_fixtures.py there (run in the
onnxruntime-training-cpu 1.19.2 venv): a 4 -> 3 -> 2 MLP trained two AdamW steps by ORT, saved
with and without optimizer state and with properties, plus ORT's nominal checkpoint; expected.npz
holds what ORT reported (parameters, and the AdamW moments computed from ORT's gradients).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from pytrain.checkpoint import CheckpointState as CoreState
from pytrain.errors import CheckpointError
from pytrain.ort import artifacts
from pytrain.ort.api import CheckpointState, Module, Optimizer

HERE = os.path.join(os.path.dirname(__file__), "fixtures", "ort_checkpoints")
TRAINABLE = ["fc1.weight", "fc1.bias", "fc2.weight"]
PROPERTIES = {"epoch": 7, "best_loss": 0.25, "note": "from onnxruntime 1.19.2"}


@pytest.fixture(scope="module")
def expected():
    return dict(np.load(os.path.join(HERE, "expected.npz")))


def path(name):
    return os.path.join(HERE, name)


@pytest.mark.parametrize("loader", [CheckpointState.load_checkpoint, CoreState.load_checkpoint])
def test_parameters_and_properties(loader, expected):
    state = loader(path("params.ckpt"))
    params = dict(state.parameters) if isinstance(state, CheckpointState) else state.parameters
    assert sorted(params) == sorted(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
    for name, p in params.items():
        np.testing.assert_array_equal(p.data, expected["param/" + name])
        assert p.data.dtype == np.float32
        assert p.requires_grad is (name in TRAINABLE)
    assert dict(state.properties) == PROPERTIES
    assert isinstance(state.properties["epoch"], int)
    if isinstance(state, CoreState):
        assert state.optimizer_state is None


def test_optimizer_state(expected):
    state = CoreState.load_checkpoint(path("optimizer.ckpt"))
    opt = state.optimizer_state
    assert opt.step == 2
    assert opt.learning_rate == pytest.approx(1e-3)
    assert sorted(opt.slots) == sorted(TRAINABLE)
    for name in TRAINABLE:
        for slot in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(opt.slots[name][slot], expected["%s/%s" % (slot, name)], rtol=1e-5, atol=1e-7)
    assert dict(state.properties) == PROPERTIES


def test_bytes_and_nominal():
    with open(path("optimizer.ckpt"), "rb") as f:
        state = CoreState.load_checkpoint(f.read())
    assert state.optimizer_state.step == 2
    nominal = CoreState.load_checkpoint(path("nominal.ckpt"))
    assert nominal.nominal
    assert [(n, p.requires_grad) for n, p in nominal.parameters.items()] == \
        [("fc1.weight", True), ("fc1.bias", True), ("fc2.weight", True), ("fc2.bias", False)]


def test_damaged_file_is_refused(tmp_path):
    with open(path("optimizer.ckpt"), "rb") as f:
        data = f.read()
    for bad in (data[:len(data) // 2], data[:40]):
        with pytest.raises(CheckpointError):
            CoreState.load_checkpoint(bad)
    lying = bytearray(data)
    lying[0:4] = (len(data) + 100).to_bytes(4, "little")  # root table past the end
    with pytest.raises(CheckpointError):
        CoreState.load_checkpoint(bytes(lying))


def _mlp():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.RandomState(3)
    inits = {"fc1.weight": rng.randn(3, 4), "fc1.bias": rng.randn(3), "fc2.weight": rng.randn(2, 3),
             "fc2.bias": rng.randn(2)}
    nodes = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["output"], transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 2])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)


def test_training_resumes_from_ort_checkpoint(tmp_path, expected):
    """ORT's weights and AdamW moments carry over: the third step is ORT's AdamW step 3 (adam_mode 1,
    Hugging Face's rule) from ORT's state."""
    artifacts.generate_artifacts(_mlp(), requires_grad=TRAINABLE, frozen_params=["fc2.bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(tmp_path))
    state = CheckpointState.load_checkpoint(path("optimizer.ckpt"))
    module = Module(str(tmp_path / "training_model.onnx"), state, str(tmp_path / "eval_model.onnx"))
    optimizer = Optimizer(str(tmp_path / "optimizer_model.onnx"), module)
    assert optimizer.get_learning_rate() == pytest.approx(1e-3)  # from the checkpoint
    before = {n: np.array(p.data, dtype=np.float64) for n, p in state.parameters}
    module.train()
    module(expected["x0"], expected["y0"])
    grads = {n: np.array(state.parameters[n].grad, dtype=np.float64) for n in TRAINABLE}
    optimizer.step()
    core = state.core.optimizer_state
    assert core.step == 3
    b1, b2, eps, lr = 0.9, 0.999, 1e-6, 1e-3  # ORT's AdamW defaults
    for n in TRAINABLE:
        m = b1 * expected["exp_avg/" + n] + (1 - b1) * grads[n]
        v = b2 * expected["exp_avg_sq/" + n] + (1 - b2) * grads[n] ** 2
        np.testing.assert_allclose(core.slots[n]["exp_avg"], m, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(core.slots[n]["exp_avg_sq"], v, rtol=1e-4, atol=1e-9)  # float32 sums
        want = before[n] - lr * np.sqrt(1 - b2 ** 3) / (1 - b1 ** 3) * m / (np.sqrt(v) + eps)
        np.testing.assert_allclose(state.parameters[n].data, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state.parameters["fc2.bias"].data, before["fc2.bias"])
    # saved again, it is a pytrain checkpoint with everything in it
    CheckpointState.save_checkpoint(state, str(tmp_path / "again"), include_optimizer_state=True)
    again = CoreState.load_checkpoint(str(tmp_path / "again"))
    assert again.optimizer_state.step == 3 and dict(again.properties)["note"] == PROPERTIES["note"]


def test_orts_nominal_checkpoint_filled_from_a_buffer(tmp_path, expected):
    """ORT's nominal checkpoint records names only; the Module takes the shapes from the model and
    copy_buffer_to_parameters fills it, as in ORT."""
    artifacts.generate_artifacts(_mlp(), requires_grad=TRAINABLE, frozen_params=["fc2.bias"],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(tmp_path))
    full = CheckpointState.load_checkpoint(path("params.ckpt"))
    nominal = CheckpointState.load_checkpoint(path("nominal.ckpt"))
    m_full = Module(str(tmp_path / "training_model.onnx"), full)
    m_nominal = Module(str(tmp_path / "training_model.onnx"), nominal)
    assert m_nominal.get_parameters_size(False) == m_full.get_parameters_size(False) == 12 + 3 + 6 + 2
    with pytest.raises(CheckpointError, match="Please load the model parameters first."):
        m_nominal(expected["x0"], expected["y0"])
    m_nominal.copy_buffer_to_parameters(m_full.get_contiguous_parameters(), trainable_only=False)
    np.testing.assert_array_equal(m_nominal(expected["x0"], expected["y0"]), m_full(expected["x0"], expected["y0"]))


PY38 = os.path.join(os.path.dirname(__file__), "..", "..", "build", "py38-numpy117", "bin", "python")


@pytest.mark.skipif(not os.path.exists(PY38),
                    reason="the Python 3.8 + numpy 1.17 venv (built by tests/api/test_python38_numpy117.py) is not there")
def test_reader_on_python38_numpy117(tmp_path, expected):
    import subprocess

    script = ("import sys, numpy as np; sys.path.insert(0, sys.argv[1]);"
              "from pytrain.checkpoint import CheckpointState as S; s = S.load_checkpoint(sys.argv[2]);"
              "np.savez(sys.argv[3], step=s.optimizer_state.step, **{n: p.data for n, p in s.parameters.items()})")
    out = str(tmp_path / "read.npz")
    subprocess.run([PY38, "-c", script, os.path.join(os.path.dirname(__file__), "..", ".."), path("optimizer.ckpt"), out],
                   check=True, timeout=120)
    got = np.load(out)
    assert int(got["step"]) == 2
    for name in ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]:
        np.testing.assert_array_equal(got[name], expected["param/" + name])
