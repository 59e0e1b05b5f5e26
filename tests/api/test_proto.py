"""The pure-Python ONNX codec against the onnx package: byte-exact round trips of real models,
every attribute kind, typed and raw tensor fields, and clear errors on broken input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as OTP
from onnx import helper as oh
from onnx import numpy_helper

from pytrain.generator import models
from pytrain.errors import ModelFormatError
from pytrain.proto import ModelProto, TensorProto, node_attributes, save_model, to_array
from pytrain.engine.validate import load_model


def _all_attribute_kinds_model(opset: int) -> onnx.ModelProto:
    node = oh.make_node("Identity", ["x"], ["y"], name="n")
    node.attribute.extend([
        oh.make_attribute("f", 1.5), oh.make_attribute("i", -3), oh.make_attribute("zero", 0),
        oh.make_attribute("s", b"hello"), oh.make_attribute("empty", b""),
        oh.make_attribute("t", numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))),
        oh.make_attribute("floats", [1.0, -2.5]), oh.make_attribute("ints", [1, -2, 2 ** 40]),
        oh.make_attribute("strings", [b"a", b"bc"]),
        oh.make_attribute("tensors", [numpy_helper.from_array(np.array([1, 2], dtype=np.int64))]),
        oh.make_attribute("g", oh.make_graph([], "sub", [], [])),
    ])
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", OTP.FLOAT, ["N", 3])],
                      [oh.make_tensor_value_info("y", OTP.FLOAT, ["N", 3])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.metadata_props.add(key="k", value="v")
    return m


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_round_trip_is_byte_exact(opset):
    m = _all_attribute_kinds_model(opset)
    data = m.SerializeToString()
    ours = ModelProto.FromString(data)
    assert ours.SerializeToString() == data
    attrs = node_attributes(ours.graph.node[0])
    assert attrs["f"] == 1.5 and attrs["i"] == -3 and attrs["zero"] == 0
    assert attrs["s"] == "hello" and attrs["empty"] == ""
    np.testing.assert_array_equal(attrs["t"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert attrs["floats"] == [1.0, -2.5] and attrs["ints"] == [1, -2, 2 ** 40]
    assert attrs["strings"] == ["a", "bc"]


def test_torch_exported_model_round_trip():
    torch = pytest.importorskip("torch")
    from torch_models import CNN, TokenModel, export

    for cls, example in ((CNN, torch.zeros(2, 1, 12, 12)), (TokenModel, torch.zeros(2, 7, dtype=torch.long))):
        data = export(cls(), example)
        assert load_model(data).SerializeToString() == data


@pytest.mark.parametrize("dtype,field", [
    (np.float32, "float_data"), (np.float64, "double_data"), (np.int64, "int64_data"),
    (np.int32, "int32_data"), (np.int8, "int32_data"), (np.uint8, "int32_data"), (np.bool_, "int32_data"),
    (np.float16, "int32_data"), (np.uint64, "uint64_data"),
])
def test_typed_tensor_fields(dtype, field):
    a = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    typed = oh.make_tensor("t", oh.np_dtype_to_tensor_dtype(np.dtype(dtype)), a.shape,
                           a.ravel().tolist())
    assert typed.HasField("raw_data") is False and len(getattr(typed, field)) == 12
    ours = TensorProto.FromString(typed.SerializeToString())
    np.testing.assert_array_equal(to_array(ours), a)
    raw = numpy_helper.from_array(a, "t")
    np.testing.assert_array_equal(to_array(TensorProto.FromString(raw.SerializeToString())), a)


def test_written_models_pass_the_checker_and_load_in_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    m = models.cnn((1, 8, 8), 3, channels=(2,), hidden=4)
    path = tmp_path / "m.onnx"
    save_model(m, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    out = ort.InferenceSession(str(path)).run(None, {"input": np.zeros((1, 1, 8, 8), np.float32)})[0]
    assert out.shape == (1, 3)


def test_accepts_path_bytes_and_onnx_objects(tmp_path):
    m = onnx.ModelProto()
    m.ParseFromString(models.mlp(4, [3], 2).SerializeToString())
    path = tmp_path / "a.onnx"
    onnx.save(m, str(path))
    for source in (str(path), path, m.SerializeToString(), bytearray(m.SerializeToString()), m):
        assert load_model(source).SerializeToString() == m.SerializeToString()


@pytest.mark.parametrize("cut", [1, 7, 40, -3])
def test_truncated_model_is_a_clear_error(cut):
    data = models.mlp(4, [3], 2).SerializeToString()
    with pytest.raises(ModelFormatError, match="not a valid ONNX"):
        load_model(data[:cut])


def test_garbage_and_empty_inputs(tmp_path):
    with pytest.raises(ModelFormatError, match="is empty"):
        load_model(b"")
    with pytest.raises(ModelFormatError, match="not a valid ONNX"):
        load_model(b"\xff" * 32)
    with pytest.raises(ModelFormatError, match="does not exist"):
        load_model(str(tmp_path / "missing.onnx"))
    p = tmp_path / "text.onnx"
    p.write_text("hello, this is not a model")
    with pytest.raises(ModelFormatError, match=str(p).replace(".", r"\.")):
        load_model(str(p))


def test_external_data_loads_from_the_folder_and_is_refused_without_it(tmp_path):
    # (tests/api/test_external_data.py covers locations, offsets, bytes and the refusals in depth)
    m = models.mlp(4, [3], 2)
    om = onnx.load_from_string(m.SerializeToString())
    want = [numpy_helper.to_array(t) for t in om.graph.initializer]
    onnx.save_model(om, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    loaded = load_model(str(tmp_path / "ext.onnx"))
    for t, w in zip(loaded.graph.initializer, want):
        np.testing.assert_array_equal(to_array(t), w)
    with pytest.raises(ModelFormatError, match="external"):
        load_model((tmp_path / "ext.onnx").read_bytes())  # bytes without the w.bin they refer to
