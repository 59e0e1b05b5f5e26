"""By example with a pretrained feature extractor (pytrain.webapp.feature_head): a tiny
torch conv backbone with BatchNorm and Dropout, exported three ways, stays frozen in inference mode
while a Gemm head trains on its features (computed once); the composed export runs in onnxruntime
and equals torch's backbone followed by the trained head; bad backbones are refused clearly."""
from __future__ import annotations

import io
import json
import warnings
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper, TensorProto  # noqa: E402

from pytrain.errors import ModelFormatError, PytrainError  # noqa: E402
from pytrain.generator.torch_export import torch_export  # noqa: E402
from pytrain.webapp import bridge, feature_head  # noqa: E402
from pytrain.webapp.common import WebappError  # noqa: E402
from pytrain.webapp.session import Session  # noqa: E402

SIDE = 16
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def _net() -> "torch.nn.Module":
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Dropout(0.5), torch.nn.Conv2d(4, 6, 3, stride=2), torch.nn.ReLU())
    with torch.no_grad():   # running statistics far from batch statistics: training-mode BN would show
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.3, 3.0)
        for conv in (net[0], net[4]):   # positive filters: the features grow with brightness (the task below)
            conv.weight.abs_()
    return net


def _export(net, how: str, tmp_path):
    """(model bytes, {external file: bytes}) of ``net`` exported ``how``."""
    x = torch.zeros(2, 3, SIDE, SIDE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "torchscript-train":   # BatchNorm node with training_mode=1, Dropout kept
            net.train()
            buf = io.BytesIO()
            torch.onnx.export(net, x, buf, dynamo=False, input_names=["img"], output_names=["output"],
                              dynamic_axes={"img": {0: "b", 2: "h", 3: "w"}}, opset_version=13,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
            return buf.getvalue(), {}
        if how == "torchscript-fixed":   # eval mode, batch 1 and 16x16 fixed (no dynamic axes)
            net.eval()
            buf = io.BytesIO()
            torch.onnx.export(net, x[:1], buf, dynamo=False, input_names=["img"], output_names=["out"],
                              opset_version=17)
            return buf.getvalue(), {}
        if how == "pytrain.torch_export":
            net.train()
            return torch_export(net, x), {}
        if how == "dynamo-external":    # weights in a .onnx.data side file
            net.eval()
            path = tmp_path / "bb.onnx"
            prog = torch.onnx.export(net, (x,), dynamo=True, input_names=["img"], output_names=["out"],
                                     dynamic_shapes={"input": {0: torch.export.Dim("b")}})
            prog.save(str(path), external_data=True)
            data = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "bb.onnx"}
            assert data, "the dynamo export wrote no external data file"
            return path.read_bytes(), data
    raise AssertionError(how)


def _images(n: int, seed: int = 0):
    """Two classes a tiny frozen net can tell apart: dark and bright pictures."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.random((n, 3, SIDE, SIDE), dtype=np.float32) * 0.2 + 0.8 * y[:, None, None, None].astype(np.float32)
    return x, y


def _torch_reference(net, x: np.ndarray, w: np.ndarray, b: np.ndarray, normalize: str) -> np.ndarray:
    net.eval()
    xin = (x - MEAN) / STD if normalize == "imagenet" else x
    with torch.no_grad():
        f = net(torch.from_numpy(np.ascontiguousarray(xin, np.float32))).mean(dim=(2, 3)).numpy()
    return f @ w.T + b


def _head(model_bytes: bytes):
    m = onnx.load_from_string(model_bytes)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    return m, inits["head/fc1.weight"], inits["head/fc1.bias"]


@pytest.mark.parametrize("how,normalize", [("torchscript-train", "unit"), ("pytrain.torch_export", "imagenet"),
                                           ("dynamo-external", "unit"), ("torchscript-fixed", "imagenet")])
def test_head_trains_on_frozen_backbone_and_export_composes(how, normalize, tmp_path):
    net = _net()
    blob, extra = _export(net, how, tmp_path)
    before = {k: v.detach().clone() for k, v in net.state_dict().items()}
    info = Session.inspect_backbone(blob, "bb.onnx", extra, SIDE, normalize)
    assert info["shape"] == [3, SIDE, SIDE] and info["features"] == 6 and info["pooled"]
    # conv 112 + BatchNorm 8 (+ 8 running statistics) + conv 222; eval-mode exports fold BatchNorm into the conv
    assert info["params"] == (350 if how in ("torchscript-train", "pytrain.torch_export") else 334)
    x, y = _images(24)
    s = Session()
    s.use_arrays(x, y, classes=["dark", "bright"], val_fraction=0.25)
    model = s.build_cnn("AdamW", backbone={"bytes": blob, "name": "bb.onnx", "extra_files": extra,
                                           "size": SIDE, "normalize": normalize})
    assert model["origin"] == "backbone" and model["sample_shape"] == [3, SIDE, SIDE]
    assert model["params"] == model["head_params"] == 6 * 2 + 2     # only the head trains
    runs = []
    real_run = s.backbone._session.run
    s.backbone._session.run = lambda *a, **k: runs.append(1) or real_run(*a, **k)
    s.configure(batch_size=4, lr=0.05)
    losses = []
    for _ in range(8):
        losses += s.train_for(budget_ms=1e9)["losses"]
    assert runs == [], "features are computed once, at build: training epochs run no backbone"
    assert np.mean(losses[-6:]) < np.mean(losses[:6])
    res = s.evaluate()
    assert res["metric"] == 1.0, res

    exported = s.export()
    m, w, b = _head(exported)
    onnx.checker.check_model(m)
    bn = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
    if how in ("torchscript-train", "pytrain.torch_export"):   # BN kept as a node: now in inference mode
        assert bn and all(len(n.output) == 1 and all(a.name != "training_mode" or a.i == 0 for a in n.attribute)
                          for n in bn)
    assert not [n for n in m.graph.node if n.op_type == "Dropout"]
    assert all(not t.HasField("data_location") or t.data_location == 0 for t in m.graph.initializer)
    assert [i.name for i in m.graph.input] == ["input"] and [o.name for o in m.graph.output] == ["output"]
    sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    batch = 1 if how == "torchscript-fixed" else 5
    xs = x[:batch]
    got = sess.run(None, {"input": xs})[0]
    # torch's frozen backbone (eval mode, weights as exported) followed by the trained head
    np.testing.assert_allclose(got, _torch_reference(net, xs, w, b, normalize), rtol=1e-4, atol=1e-4)
    page = np.array([s.predict(xi)["outputs"][0] for xi in xs], np.float32)    # what the page shows
    np.testing.assert_allclose(got, page, rtol=1e-4, atol=1e-4)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_features_cached_and_weights_unchanged_after_training(tmp_path):
    net = _net()
    blob, _ = _export(net, "pytrain.torch_export", tmp_path)
    x, y = _images(16, seed=1)
    s = Session()
    s.use_arrays(x, y, classes=["a", "b"])
    s.build_cnn("SGD", backbone={"bytes": blob, "name": "bb.onnx"})
    ext_before = onnx.load_from_string(s.backbone.blob)
    for _ in range(3):
        s.train_for(budget_ms=1e9)
    composed = onnx.load_from_string(s.export())
    after = {t.name: numpy_helper.to_array(t) for t in composed.graph.initializer}
    for t in ext_before.graph.initializer:           # every backbone weight, bit for bit
        np.testing.assert_array_equal(after[t.name], numpy_helper.to_array(t))
    state = dict(net.state_dict())
    np.testing.assert_array_equal(after["backbone/1.running_mean"], state["1.running_mean"].numpy())
    np.testing.assert_array_equal(after["backbone/0.weight"], state["0.weight"].numpy())
    # the cache holds one vector per distinct example, the same the extractor gives now
    assert len(s.backbone._cache) == 16
    np.testing.assert_allclose(s.backbone.features(x[:3]),
                               s.backbone._session.run(None, {"input": x[:3]})[0], rtol=0, atol=0)


def test_browser_resume_keeps_the_backbone_and_run_file_carries_it(tmp_path):
    net = _net()
    blob, _ = _export(net, "pytrain.torch_export", tmp_path)
    x, y = _images(12, seed=2)
    s = Session()
    s.use_arrays(x, y, classes=["a", "b"])
    s.build_cnn("AdamW", backbone={"bytes": blob, "name": "bb.onnx", "normalize": "imagenet"})
    s.train_for(budget_ms=1e9)
    snap = s.snapshot()
    assert feature_head.ARTIFACT_KEY in snap["artifacts"]
    r = Session()
    r.restore(snap["meta"], snap["artifacts"], snap["checkpoint"], snap["data"])
    assert r.backbone is not None and r.digest() == s.digest()
    np.testing.assert_array_equal(np.array(r.predict(x[0])["outputs"]), np.array(s.predict(x[0])["outputs"]))
    assert r.export() == s.export()
    # "What it learned": the frozen backbone as one row in front of the head's trained parameters
    learned = s.insights()
    assert learned["layers"][0]["trains"] is False and learned["layers"][0]["size"] == 350
    assert [(l["name"], l["trains"]) for l in learned["layers"][1:]] == [("fc1.weight", True), ("fc1.bias", True)]
    assert np.sum(learned["confusion"]) == len(s.source.data["val_x"])
    assert "backbone.onnx" in zipfile.ZipFile(io.BytesIO(s.run_file())).namelist()   # tests/web/test_runfile_backbone.py
    # switching to a model without a backbone drops it
    s.build_cnn("AdamW")
    assert s.backbone is None and s.model["origin"] == "cnn"
    assert "backbone" not in s.artifacts


def _onnx_bytes(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _bad_backbones():
    f = TensorProto.FLOAT
    mlp = _onnx_bytes([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", f, ["N", 4])],
                      [helper.make_tensor_value_info("y", f, ["N", 4])])
    img = helper.make_tensor_value_info("x", f, ["N", 3, 8, 8])
    lacking = _onnx_bytes([helper.make_node("RoiAlign", ["x", "r", "i"], ["y"])], [img],
                          [helper.make_tensor_value_info("y", f, None)],
                          [numpy_helper.from_array(np.zeros((1, 4), np.float32), "r"),
                           numpy_helper.from_array(np.zeros((1,), np.int64), "i")])
    custom = _onnx_bytes([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")], [img],
                         [helper.make_tensor_value_info("y", f, None)])
    to_int = _onnx_bytes([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64)], [img],
                         [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    fixed4 = _onnx_bytes([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", f, [4, 3, 8, 8])],
                         [helper.make_tensor_value_info("y", f, None)])
    huge = _onnx_bytes([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", f, ["N", 3, 100000, 100000])],
                       [helper.make_tensor_value_info("y", f, None)])
    five = _onnx_bytes([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", f, ["N", 5, 8, 8])],
                       [helper.make_tensor_value_info("y", f, None)])
    return [("not-an-image-model", mlp, r"\[N, C, H, W\]"),
            ("op-pytrain-lacks", lacking, "RoiAlign"),
            ("custom-domain", custom, "Frobnicate|com.example"),
            ("integer-output", to_int, "floats"),
            ("fixed-batch-4", fixed4, "batch size is fixed at 4"),
            ("huge-input", huge, "between 8 and"),
            ("five-channels", five, "5 channels"),
            ("garbage", b"\x08\x07\x12\xff\xff\xff\xff\x0fhostile", "bb.onnx"),
            ("text", b"name,label\n1,2\n", "bb.onnx")]


@pytest.mark.parametrize("case", _bad_backbones(), ids=lambda c: c[0])
def test_bad_backbone_is_refused_clearly(case):
    _, blob, pattern = case
    with pytest.raises(PytrainError, match=pattern):
        Session.inspect_backbone(blob, "bb.onnx")
    # through the page's bridge: an expected error with a message, never a traceback
    s = Session()
    text, _ = bridge.call(s, "inspect_backbone", json.dumps({"blob": {"$blob": 0}, "name": "bb.onnx"}), [blob])
    reply = json.loads(text)
    assert reply["ok"] is False and reply["error"]["expected"] is True and reply["error"]["trace"] == ""
    assert "bb.onnx" in reply["error"]["message"]


def test_missing_external_data_is_named(tmp_path):
    blob, extra = _export(_net(), "dynamo-external", tmp_path)
    with pytest.raises(ModelFormatError, match="external"):
        Session.inspect_backbone(blob, "bb.onnx", {})
    assert Session.inspect_backbone(blob, "bb.onnx", extra)["features"] == 6


def test_open_size_uses_the_chosen_side_and_wrong_examples_are_refused(tmp_path):
    blob, _ = _export(_net(), "torchscript-train", tmp_path)
    info = Session.inspect_backbone(blob, "bb.onnx", None, 24)
    assert info["open_size"] and info["shape"] == [3, 24, 24]
    s = Session()
    x, y = _images(8)
    s.use_arrays(x, y, classes=["a", "b"])      # 16x16 examples, backbone asked for 24x24
    with pytest.raises(PytrainError, match=r"\[3, 24, 24\]"):
        s.build_cnn("AdamW", backbone={"bytes": blob, "name": "bb.onnx", "size": 24})
    with pytest.raises(WebappError, match="normalisation"):
        Session.inspect_backbone(blob, "bb.onnx", None, 24, "zscore")
