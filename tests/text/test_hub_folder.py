"""A Hub folder as transformers.js has it (:mod:`pytrain.text.hub_folder`): read from its files or a zip, the model
transformers.js would load in a browser chosen by default (q8: onnx/model_quantized.onnx, unless config.json names a
dtype), and written back so that transformers.js finds a model in a browser and in Node.js alike."""
from __future__ import annotations

import json

import pytest

from hub_fixtures import HUB

from pytrain.errors import DataError
from pytrain.text.hub_folder import read_folder, transformers_js_files, unpack, zip_folder


def _files(name="gpt2"):
    d = HUB / name
    return {"tiny/" + p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def _dtype(files):
    return json.loads(files["config.json"]).get("transformers.js_config", {}).get("dtype")


def test_the_default_is_the_file_a_browser_loads_and_a_choice_is_honoured_or_refused_naming_the_files():
    files = _files()
    up = read_folder({"gpt2.zip": zip_folder(files)})
    assert (up.model_name, up.dtype, up.dtypes) == ("onnx/model_quantized.onnx", "q8", ["fp32", "q8"])
    assert up.model == files["tiny/onnx/model_quantized.onnx"] and up.config == files["tiny/config.json"]
    assert "tokenizer.json" in up.files and not any(k.endswith(".onnx") for k in up.files)
    assert read_folder(files, "fp32").model == files["tiny/onnx/model.onnx"]   # the folder's files as chosen
    with pytest.raises(DataError, match=r"no q4 model \(onnx/model_q4.onnx\); it holds onnx/model.onnx \(fp32\)"):
        read_folder(files, "q4")
    cfg = json.loads(files["tiny/config.json"])
    cfg["transformers.js_config"] = {"dtype": "fp32"}
    files["tiny/config.json"] = json.dumps(cfg).encode()
    assert read_folder(files).dtype == "fp32"
    one = read_folder({"my.onnx": files["tiny/onnx/model.onnx"]})
    assert (one.model_name, one.dtype) == ("my.onnx", "fp32")
    with pytest.raises(DataError, match="holds no ONNX model"):
        read_folder({"config.json": b"{}"})
    with pytest.raises(DataError, match="points out of the model's folder"):   # the CLI writes the folder's paths
        read_folder({"x.zip": zip_folder({"../config.json": b"{}", "onnx/model.onnx": b""})})


def test_the_written_folder_loads_in_a_browser_and_in_node_and_keeps_the_tokenizer_files():
    files = unpack(_files())
    float_only = transformers_js_files({"fp32": b"m"}, files)
    assert sorted(float_only) == ["config.json", "onnx/model.onnx", "oracle.json", "tokenizer.json",
                                  "tokenizer_config.json"]
    assert _dtype(float_only) == "fp32"   # a browser would look for model_quantized.onnx otherwise
    both = transformers_js_files({"fp32": b"m", "q8": b"q"}, files)
    assert both["onnx/model_quantized.onnx"] == b"q" and _dtype(both) is None   # each runtime's default is there
    q4 = transformers_js_files({"fp32": b"m", "q4": b"q"}, dict(files, **{"tokenizer_config.json": b"{}"}))
    assert _dtype(q4) == "q4" and q4["tokenizer_config.json"] == b"{}"
    assert sorted(unpack({"x.zip": zip_folder(both, "tiny")})) == sorted(both)
    with pytest.raises(DataError, match="needs the model's config.json"):
        transformers_js_files({"fp32": b"m"}, {"tokenizer.json": b"{}"})
