"""ONNX external data: torch's default exporter writes ``m.onnx`` + ``m.onnx.data``;
pytrain reads the tensors from the model's folder (a path) or from {location: bytes} (bytes), and
refuses any location that leaves the model's folder, a missing file, or sizes that do not match."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytrain.generator import artifacts
from pytrain.device.api import CheckpointState, Module
from pytrain.errors import ModelFormatError
from pytrain.proto import to_array
from pytrain.engine.validate import load_model
from pytrain.engine.runtime import InferenceSession


def _mlp_model(seed: int = 0):
    rng = np.random.default_rng(seed)
    w1, b1 = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    w2, b2 = rng.standard_normal((7, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "W1", "B1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "W2", "B2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(v, k) for k, v in (("W1", w1), ("B1", b1), ("W2", w2), ("B2", b2))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {
        "W1": w1, "B1": b1, "W2": w2, "B2": b2}


def _save_external(model, folder: str, location: str = "m.onnx.data") -> str:
    path = os.path.join(folder, "m.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


def _forward(params, x):
    return np.maximum(x @ params["W1"] + params["B1"], 0) @ params["W2"] + params["B2"]


def test_external_data_from_the_folder_and_from_bytes(tmp_path):
    model, params = _mlp_model()
    path = _save_external(model, str(tmp_path))
    assert os.path.exists(os.path.join(str(tmp_path), "m.onnx.data"))
    raw = onnx.load(path, load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in raw.graph.initializer)  # really external

    loaded = load_model(path)
    for t in loaded.graph.initializer:
        np.testing.assert_array_equal(to_array(t), params[t.name])
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(InferenceSession(path).run(None, {"x": x})[0], _forward(params, x), rtol=1e-5)

    blob = open(path, "rb").read()
    data = open(os.path.join(str(tmp_path), "m.onnx.data"), "rb").read()
    with pytest.raises(ModelFormatError, match=r"'W1'.*m\.onnx\.data.*external_data"):
        load_model(blob)
    sess = InferenceSession(blob, external_data={"m.onnx.data": data})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _forward(params, x), rtol=1e-5)
    with pytest.raises(ModelFormatError, match=r"'W1'.*'m\.onnx\.data' was not given"):
        load_model(blob, external_data={"other.data": data})

    arts = artifacts.generate_artifacts(blob, external_data={"m.onnx.data": data}, loss=artifacts.LossType.MSELoss)
    state = CheckpointState.load_checkpoint(arts.checkpoint)
    for k, v in params.items():
        np.testing.assert_array_equal(state.parameters[k].data, v)
    module = Module(arts.training_model, state, arts.eval_model)
    assert np.isfinite(float(module(x, np.zeros((4, 3), np.float32))))


def test_offsets_and_a_subfolder(tmp_path):
    model, params = _mlp_model(3)
    os.makedirs(os.path.join(str(tmp_path), "weights"))
    path = _save_external(model, str(tmp_path), "weights/all.bin")
    raw = onnx.load(path, load_external_data=False)
    offsets = [int({e.key: e.value for e in t.external_data}.get("offset", 0)) for t in raw.graph.initializer]
    assert len(set(offsets)) == 4  # one file, four ranges
    for t in load_model(path).graph.initializer:
        np.testing.assert_array_equal(to_array(t), params[t.name])
    # from bytes, a browser upload keeps the file name only
    data = open(os.path.join(str(tmp_path), "weights", "all.bin"), "rb").read()
    for t in load_model(open(path, "rb").read(), external_data={"all.bin": data}).graph.initializer:
        np.testing.assert_array_equal(to_array(t), params[t.name])


def _with_location(tmp_path, location: str, length=None, offset=None) -> bytes:
    model, _ = _mlp_model()
    path = _save_external(model, str(tmp_path))
    raw = onnx.load(path, load_external_data=False)
    t = raw.graph.initializer[0]
    info = {e.key: e.value for e in t.external_data}
    info["location"] = location
    if length is not None:
        info["length"] = str(length)
    if offset is not None:
        info["offset"] = str(offset)
    del t.external_data[:]
    for k, v in info.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    out = os.path.join(str(tmp_path), "evil.onnx")
    with open(out, "wb") as f:
        f.write(raw.SerializeToString())
    return out


@pytest.mark.parametrize("location,message", [
    ("/etc/passwd", "absolute path"),
    ("../m.onnx.data", r"contains '\.\.'"),
    ("sub/../../m.onnx.data", r"contains '\.\.'"),
    ("..\\m.onnx.data", r"contains '\.\.'"),
    ("C:\\weights.bin", "absolute path"),
    ("missing.data", "does not exist"),
])
def test_locations_leaving_the_folder_or_missing_are_refused(tmp_path, location, message):
    path = _with_location(tmp_path, location)
    with pytest.raises(ModelFormatError, match=message) as err:
        load_model(path)
    assert "'W1'" in str(err.value)
    blob = open(path, "rb").read()
    if message == "does not exist":  # from bytes: the mapping lacks it
        with pytest.raises(ModelFormatError, match=r"'W1'.*'missing.data' was not given"):
            load_model(blob, external_data={"m.onnx.data": b"\0" * 1000})
    else:  # refused from bytes too, even when the mapping has an entry of that name
        with pytest.raises(ModelFormatError, match=message):
            load_model(blob, external_data={"m.onnx.data": b"\0" * 1000, location: b"\0" * 1000})


def test_symlink_out_of_the_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    inside = tmp_path / "model"
    outside.mkdir()
    inside.mkdir()
    (outside / "secret.bin").write_bytes(b"\0" * 4096)
    os.symlink(str(outside / "secret.bin"), str(inside / "link.bin"))
    path = _with_location(inside, "link.bin")
    with pytest.raises(ModelFormatError, match="outside the model's folder"):
        load_model(path)


def test_sizes_must_match(tmp_path):
    with pytest.raises(ModelFormatError, match=r"'W1'.*length 12 does not match its shape \[5, 7\]"):
        load_model(_with_location(tmp_path, "m.onnx.data", length=12))
    with pytest.raises(ModelFormatError, match=r"'W1'.*holds \d+ bytes"):
        load_model(_with_location(tmp_path, "m.onnx.data", offset=10 ** 6))


def test_torch_default_exporter_writes_external_data(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x = torch.randn(4, 5)
    path = os.path.join(str(tmp_path), "m.onnx")
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(net, (x,), path)  # torch 2.9+: the dynamo exporter, weights in m.onnx.data
    finally:
        logging.disable(logging.NOTSET)
    assert os.path.exists(path + ".data")
    assert any(t.data_location == TensorProto.EXTERNAL for t in onnx.load(path, load_external_data=False).graph.initializer)
    with torch.no_grad():
        want = net(x).numpy()
    sess = InferenceSession(path)
    np.testing.assert_allclose(sess.run(None, {sess.input_names()[0]: x.numpy()})[0], want, rtol=1e-5, atol=1e-6)
    arts = artifacts.generate_artifacts(path, loss=artifacts.LossType.MSELoss)
    assert arts.summary["trainable_count"] == sum(p.numel() for p in net.parameters())


def test_web_app_takes_the_data_file_uploaded_with_the_model(tmp_path):
    """The page's "Your model" upload passes the .onnx.data chosen with the .onnx as {file name: bytes}."""
    from pytrain.webapp.session import Session

    model, params = _mlp_model(4)
    path = _save_external(model, str(tmp_path))
    blob = open(path, "rb").read()
    extra = {"m.onnx.data": open(path + ".data", "rb").read()}
    session = Session()
    with pytest.raises(ModelFormatError, match="external"):
        session.inspect_model(blob, "m.onnx")
    info = session.inspect_model(blob, "m.onnx", extra_files=extra)
    assert {p["name"]: p["trains"] for p in info["params"]} == {k: True for k in params}
    assert all("Gemm" in p["why"] for p in info["params"])
    summary = session.generate(blob, loss="MSELoss", optimizer="SGD", name="m.onnx", extra_files=extra)
    assert summary["ready"] and summary["params"] == sum(v.size for v in params.values())
    for k, v in params.items():
        np.testing.assert_array_equal(session.run.state.parameters[k].data, v)
