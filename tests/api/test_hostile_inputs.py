"""Hostile and careless inputs, one test each: hostile or careless models, checkpoints, numbers and calls get a
``pytrain.errors`` exception naming what is wrong (never a raw Python error, a hang, unbounded memory
or a saved broken state). tests/api/test_fuzz.py covers the same ground with thousands of mutants."""
from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import fuzz_harness as F
from pytrain.generator import artifacts, models
from pytrain.base import limits
from pytrain.device.api import CheckpointState, LinearLRScheduler, Module, Optimizer
from pytrain.cli import main as cli_main
from pytrain.errors import (ArtifactError, CheckpointError, DivergenceError, GraphError, InputError, LimitError,
                            ModelFormatError, PytrainError, SaveError)
from pytrain.proto import AttributeProto as PtAttributeProto
from pytrain.engine.validate import load_model
from pytrain.engine.runtime import InferenceSession

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()


def _vi(name, shape=(2, 3), elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


@pytest.fixture(scope="module")
def trained():
    """An MLP's artifacts and a checkpoint with optimizer state after one step."""
    return F.trained_mlp()


# ---- 1-8: model decoding and generation -------------------------------------------------------------
def test_deep_nesting_is_a_format_error_not_a_recursion_error():
    with pytest.raises(ModelFormatError, match="nested more than"):
        load_model(F.deep_nesting_bytes(2000))


def test_float_field_with_the_wrong_wire_type():
    with pytest.raises(ModelFormatError, match="wire type"):
        PtAttributeProto.FromString(b"\x0a\x01a" + b"\x10\x05")  # name 'a', then f (field 2) as a varint


def test_tensor_attribute_without_a_tensor():
    node = helper.make_node("Constant", [], ["y"])
    node.attribute.add(name="value", type=AttributeProto.TENSOR)
    data = _model([node], [], [_vi("y", None)])
    for call in (load_model, lambda d: artifacts.generate_artifacts(d, loss=None), InferenceSession):
        with pytest.raises(GraphError, match="'value' is of type TENSOR but has no value"):
            call(data)


def test_string_tensor_with_raw_data_and_huge_dims():
    t = onnx.TensorProto(name="s", data_type=TensorProto.STRING, dims=[2], raw_data=b"ab")
    data = _model([helper.make_node("Identity", ["s"], ["y"])], [], [_vi("y", None, TensorProto.STRING)], [t])
    with pytest.raises(ModelFormatError, match="STRING tensor but keeps its values in raw_data"):
        InferenceSession(data).run(None, {})
    t = onnx.TensorProto(name="s", data_type=TensorProto.STRING, dims=[10 ** 12])
    data = _model([helper.make_node("Identity", ["s"], ["y"])], [], [_vi("y", None, TensorProto.STRING)], [t])
    with pytest.raises(LimitError, match="exceeds pytrain's tensor limit"):
        InferenceSession(data).run(None, {})


def test_attribute_of_the_wrong_type_is_refused_at_load():
    node = helper.make_node("LeakyRelu", ["x"], ["y"])
    node.attribute.add(name="alpha", type=AttributeProto.INTS, ints=[1, 2])
    data = _model([node], [_vi("x")], [_vi("y")])
    for call in (lambda d: artifacts.generate_artifacts(d, loss=None), InferenceSession):
        with pytest.raises(GraphError, match="'alpha' is of type INTS, but LeakyRelu's 'alpha' is FLOAT"):
            call(data)


def test_graph_without_outputs_or_with_short_batchnorm_or_no_nodes():
    with pytest.raises(ModelFormatError, match="no outputs"):
        load_model(_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], []))
    bn = helper.make_node("BatchNormalization", ["x", "s", "b"], ["y"])
    inits = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b")]
    with pytest.raises(GraphError, match="lacks required inputs 3, 4 of BatchNormalization"):
        artifacts.generate_artifacts(_model([bn], [_vi("x")], [_vi("y")], inits), loss=None)
    # no nodes: the output is the input; pytrain runs it instead of failing to compile
    out = InferenceSession(_model([], [_vi("x")], [_vi("x")])).run(None, {"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out[0], np.ones((2, 3), np.float32))


def test_duplicate_initializer_names():
    inits = [numpy_helper.from_array(np.ones((3, 3), np.float32), "w"),
             numpy_helper.from_array(np.ones((3, 4), np.float32), "w")]
    with pytest.raises(ModelFormatError, match="'w' is defined twice"):
        load_model(_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x")], [_vi("y")], inits))


def test_ops_outside_their_opset_and_unknown_ir_versions():
    ln = helper.make_node("LayerNormalization", ["x", "s"], ["y"])
    inits = [numpy_helper.from_array(np.ones(3, np.float32), "s")]
    with pytest.raises(GraphError, match="from opset 17 on, but the model imports opset 13"):
        load_model(_model([ln], [_vi("x")], [_vi("y")], inits, opset=13))
    m = onnx.load_from_string(_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")]))
    m.ir_version = 99
    with pytest.raises(ModelFormatError, match="IR version 99"):
        load_model(m.SerializeToString())


def test_computed_tensors_past_the_limit_are_refused_before_allocation():
    # a 280-byte model that would Expand to 3e8 floats (1.2 GB)
    shape = numpy_helper.from_array(np.array([300_000_000], np.int64), "shape")
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    for node in (helper.make_node("Expand", ["one", "shape"], ["y"]),
                 helper.make_node("ConstantOfShape", ["shape"], ["y"])):
        sess = InferenceSession(_model([node], [], [_vi("y", None)], [shape, one]))
        t0 = time.monotonic()
        with pytest.raises(LimitError, match="PYTRAIN_MAX_TENSOR_BYTES"):
            sess.run(None, {})
        assert time.monotonic() - t0 < 60  # refused, not allocated (a generous bound, not a timing test)


def test_declared_shapes_past_the_limit_are_refused_at_load():
    with pytest.raises(LimitError, match="as declared"):
        load_model(_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", (100000, 100000))], [_vi("y")]))


def test_limits_are_settable():
    before = limits.max_tensor_bytes
    try:
        limits.set_limits(max_tensor_bytes=100)
        with pytest.raises(LimitError, match="100 bytes"):
            limits.check_tensor((5, 6), 4, "t")
    finally:
        limits.set_limits(max_tensor_bytes=before)
    with pytest.raises(ValueError):
        limits.set_limits(max_tensor_bytes=0)


# ---- 9-12: checkpoints ------------------------------------------------------------------------------
def _flip_zip_field(data: bytes, signature: bytes, offset: int, value: int) -> bytes:
    b = bytearray(data)
    pos = b.find(signature)
    while pos >= 0:
        b[pos + offset] = value
        pos = b.find(signature, pos + 4)
    return bytes(b)


def test_damaged_zip_fields_are_checkpoint_errors(trained):
    _, ck = trained
    # the encrypted flag, and compression methods pytrain's archives never use (AES, LZMA, BZIP2, unknown)
    for offset, value in ((8, 0x01), (10, 99), (10, 14), (10, 12), (10, 77)):
        with pytest.raises(CheckpointError):  # (zipfile reads these from the central directory)
            CheckpointState.load_checkpoint(_flip_zip_field(ck, b"PK\x01\x02", offset, value))


def _rewrite(ck: bytes, edit=None, replace=None) -> bytes:
    members = F._members(ck)
    if replace:
        members = [(n, replace.get(n, b)) for n, b in members]
    return F._with_manifest(members, edit or (lambda m: None))


def test_manifest_fields_are_validated(trained):
    _, ck = trained
    with pytest.raises(CheckpointError, match="has no 'parameters'"):
        CheckpointState.load_checkpoint(_rewrite(ck, lambda m: m.pop("parameters")))
    with pytest.raises(CheckpointError, match="'shape' must be"):
        CheckpointState.load_checkpoint(_rewrite(ck, lambda m: m["parameters"][0].update(shape="x")))
    with pytest.raises(CheckpointError, match="unknown dtype"):
        CheckpointState.load_checkpoint(_rewrite(ck, lambda m: m["parameters"][0].update(dtype="nope")))


def test_pickled_npy_is_refused_not_unpickled(trained):
    _, ck = trained
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    body = buf.getvalue()

    def edit(m):
        m["parameters"][0]["sha256"] = hashlib.sha256(body).hexdigest()
    with pytest.raises(CheckpointError, match="never unpickled"):
        CheckpointState.load_checkpoint(_rewrite(ck, edit, {"parameters/0000.npy": body}))


def test_zip_bombs_and_huge_npy_headers_stay_bounded(trained):
    _, ck = trained
    with pytest.raises(LimitError, match="manifest"):
        CheckpointState.load_checkpoint(F.zip_bomb(ck, "manifest.json"))
    with pytest.raises(CheckpointError, match="Bad CRC|more than 100"):  # a bomb that lies about its size
        CheckpointState.load_checkpoint(F.zip_bomb(ck, "parameters/0001.npy", declared=100))
    with pytest.raises(LimitError):
        CheckpointState.load_checkpoint(F.checkpoint_mutant(ck, _rng_for(4)))


def _rng_for(kind: int):
    import random

    for seed in range(1000):
        r = random.Random(seed)
        if r.randrange(9) == kind:
            return random.Random(seed)
    raise AssertionError


def test_inconsistent_checkpoints_name_the_parameter_and_both_shapes(trained):
    arts, ck = trained
    with pytest.raises(CheckpointError, match=r"'fc1.weight': the array is \[5, 6\] float32 but the manifest says \[6, 7\]"):
        CheckpointState.load_checkpoint(_rewrite(ck, lambda m: m["parameters"][0].update(shape=[6, 7])))
    with pytest.raises(CheckpointError, match="holds parameters/0000.npy more than once"):
        CheckpointState.load_checkpoint(F._zip(F._members(ck) + [F._members(ck)[0]]))
    with pytest.raises(CheckpointError, match="'fc1.weight' is listed twice"):
        CheckpointState.load_checkpoint(_rewrite(ck, lambda m: m["parameters"].append(dict(m["parameters"][0]))))

    def wrong_moment(m):  # fc1.bias's moment file given for fc1.weight
        states = m["optimizer"]["state"]
        w = [s for s in states if s["param"] == "fc1.weight"][0]
        b = [s for s in states if s["param"] == "fc1.bias" and s["slot"] == w["slot"]][0]
        w["file"], w["sha256"] = b["file"], b["sha256"]
    with pytest.raises(CheckpointError, match=r"optimizer state exp_avg\w* of 'fc1.weight': the array is \[5\]"):
        CheckpointState.load_checkpoint(_rewrite(ck, wrong_moment))
    with pytest.raises(CheckpointError, match="belongs to no parameter"):
        CheckpointState.load_checkpoint(_rewrite(ck, lambda m: m["optimizer"]["state"][0].update(param="ghost")))
    other = artifacts.generate_artifacts(models.mlp(6, [16], 3), loss=artifacts.LossType.MSELoss)
    with pytest.raises(CheckpointError, match=r"'fc1.weight' is \[16, 6\] float32 but the training model expects \[5, 6\]"):
        Module(arts.training_model, CheckpointState.load_checkpoint(other.checkpoint), arts.eval_model)


_SAVER = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from pytrain.checkpoint import CheckpointState, Parameter
from collections import OrderedDict
path, i = sys.argv[2], 0
while True:
    i += 1
    p = OrderedDict(w=Parameter("w", np.full(2_000_000, i, np.float32), True))
    CheckpointState.save_checkpoint(CheckpointState(p, None), path)
    print(i, flush=True)
"""


def test_kill_9_during_saves_leaves_a_complete_earlier_state(tmp_path):
    path = str(tmp_path / "ck")
    script = tmp_path / "saver.py"
    script.write_text(_SAVER)
    for trial in range(6):
        proc = subprocess.Popen([sys.executable, str(script), REPO, path], stdout=subprocess.PIPE, text=True)
        for _ in range(1 + trial % 3):
            assert proc.stdout.readline(), "the saver stopped"
        time.sleep(0.013 * trial)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        state = CheckpointState.load_checkpoint(path)  # complete: every checksum verified
        w = state.parameters["w"].data
        assert w.shape == (2_000_000,) and (w == w[0]).all()
    # the loads above removed what the killed savers left; a save leaves nothing either
    CheckpointState.save_checkpoint(state, path)
    assert sorted(os.listdir(str(tmp_path))) == ["ck", "saver.py"]


# ---- 13-17: numbers and API ---------------------------------------------------------------------------
@pytest.fixture()
def session(trained):
    arts, _ = trained
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    module = Module(arts.training_model, state, arts.eval_model)
    return arts, state, module, Optimizer(arts.optimizer_model, module)


@pytest.mark.parametrize("lr", [-1, float("nan"), float("inf"), "abc", None])
def test_bad_learning_rates_are_refused(session, lr):
    _, _, _, opt = session
    with pytest.raises(InputError, match="learning rate"):
        opt.set_learning_rate(lr)
    with pytest.raises(InputError):
        LinearLRScheduler(opt, 0, 10, lr)


def test_bad_hyper_parameters_are_refused_at_generation():
    for make in (lambda: artifacts.AdamW(weight_decay=float("nan")), lambda: artifacts.SGD(momentum=-1),
                 lambda: artifacts.Adam(eps=float("inf")), lambda: artifacts.Adam(betas=(0.9, 1.0))):
        with pytest.raises(ArtifactError):
            make()


def test_non_finite_steps_are_refused_before_any_update(session):
    arts, state, module, opt = session
    x, y = np.ones((2, 6), np.float32), np.ones((2, 3), np.float32)
    module(x, y)
    opt.step()
    before = {k: p.data.copy() for k, p in state.parameters.items()}
    grads = {k: None if p.grad is None else p.grad.copy() for k, p in state.parameters.items()}
    moments = {k: {s: v.copy() for s, v in d.items()} for k, d in state.optimizer_state.slots.items()}
    step = state.optimizer_state.step
    bad = x.copy()
    bad[1, 2] = np.nan
    with pytest.raises(DivergenceError, match="input 'input' holds NaN") as refused:
        module(bad, y)
    # what diverged, as a field the page shows without taking the message apart
    assert refused.value.reason.startswith("the ") and "input 'input' holds NaN" in refused.value.reason
    assert "refused" not in refused.value.reason and refused.value.loss is None
    for k, p in state.parameters.items():
        np.testing.assert_array_equal(p.data, before[k])
        if grads[k] is not None:
            np.testing.assert_array_equal(p.grad, grads[k])
    # a non-finite gradient reaching the optimizer (set by hand) is refused, and the step count stays
    state.parameters["fc1.weight"].grad[0, 0] = np.inf
    with pytest.raises(DivergenceError, match="'fc1.weight'"):
        opt.step()
    assert state.optimizer_state.step == step
    for k, d in moments.items():
        for s, v in d.items():
            np.testing.assert_array_equal(state.optimizer_state.slots[k][s], v)


def test_misuse_gets_clear_errors(session, tmp_path):
    arts, state, module, _ = session
    with pytest.raises(ModelFormatError, match="eval artifact, not the training model"):
        Module(arts.eval_model, state, arts.eval_model)
    with pytest.raises(InputError, match="numeric vector"):
        module.copy_buffer_to_parameters(np.array(["a"] * module.get_parameters_size()))
    with pytest.raises(CheckpointError, match="path or bytes, got int"):
        CheckpointState.load_checkpoint(123)
    with pytest.raises(SaveError, match="%s: it is a directory" % str(tmp_path).replace("\\", "\\\\")):
        CheckpointState.save_checkpoint(state, str(tmp_path))
    with pytest.raises(SaveError, match="nope/x.onnx"):
        module.export_model_for_inferencing(str(tmp_path / "nope" / "x.onnx"), ["output"])


def _cli(capsys, *argv):
    code = cli_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_refuses_destructive_numbers_and_single_class_data(tmp_path, capsys):
    (tmp_path / "m.onnx").write_bytes(models.to_bytes(models.mlp(4, [5], 3)))
    code, _, err = _cli(capsys, "generate", tmp_path / "m.onnx", "-o", tmp_path / "bad", "--weight-decay", "nan")
    assert code != 0 and "weight_decay" in err and not (tmp_path / "bad").exists()
    assert _cli(capsys, "generate", tmp_path / "m.onnx", "-o", tmp_path / "a")[0] == 0
    x = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(30) % 3)
    before = (tmp_path / "a" / "checkpoint").read_bytes()
    code, _, err = _cli(capsys, "train", tmp_path / "a", "--data", tmp_path / "d.npz", "--lr", "inf", "--quiet")
    assert code != 0 and "--lr" in err
    assert (tmp_path / "a" / "checkpoint").read_bytes() == before
    np.savez(tmp_path / "one.npz", x=x, y=np.zeros(30, np.int64))
    code, _, err = _cli(capsys, "train", tmp_path / "a", "--data", tmp_path / "one.npz", "--quiet")
    assert code != 0 and "one class only" in err
    # a learning rate so large the weights overflow: divergence is reported, no NaN weights are saved
    code, _, err = _cli(capsys, "train", tmp_path / "a", "--data", tmp_path / "d.npz", "--lr", "1e38",
                        "--epochs", "3", "--batch-size", "8", "--quiet")
    assert code != 0 and "diverged" in err, err
    state = CheckpointState.load_checkpoint(str(tmp_path / "a" / "checkpoint"))
    assert all(np.isfinite(p.data).all() for p in state.parameters.values())


def test_only_pytrain_errors_escape_the_public_entry_points():
    """The error classes a caller catches are all PytrainError (and keep the builtin bases they had)."""
    for cls in (LimitError, DivergenceError, SaveError, CheckpointError, ModelFormatError, GraphError):
        assert issubclass(cls, PytrainError)
    assert issubclass(LimitError, MemoryError) and issubclass(SaveError, OSError)
