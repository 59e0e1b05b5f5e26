"""pytrain.webapp (the Python side of the web worker) on CPython: the same calls the page makes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pytrain import webapp
from pytrain.webapp import bridge
from synthetic_digits import digits_blob


def _iris_text() -> str:
    datasets = pytest.importorskip("sklearn.datasets")
    iris = datasets.load_iris()
    rows = ["a,b,c,d,species"] + [",".join("%g" % v for v in r) + "," + iris.target_names[t]
                                  for r, t in zip(iris.data, iris.target)]
    return "\n".join(rows) + "\n"


def _trained_digits(steps: int = 30) -> webapp.Session:
    s = webapp.Session()
    s.use_digits(digits_blob(), n_train=500, n_val=100)
    s.build_digits("mlp", "AdamW")
    s.configure(batch_size=32, lr=0.003)
    while s.run.at.step < steps:               # train_for stops at each epoch's end
        s.train_for(budget_ms=1e9, max_steps=steps - s.run.at.step)
    return s


def test_digits_train_evaluate_predict():
    s = _trained_digits(40)
    assert (s.run.at.step, s.run.at.epoch, s.run.at.epoch_step) == (40, 2, 40 - 2 * 16)     # 16 batches of 32 per epoch
    ev = s.evaluate()
    assert ev["metric_name"] == "accuracy" and ev["metric"] > 0.8 and ev["n"] == 100
    p = s.predict(s.source.data["val_x"][0])
    assert len(p["probabilities"][0]) == 10 and abs(sum(p["probabilities"][0]) - 1) < 1e-5
    assert p["label"][0] == str(p["class"][0])


def test_snapshot_restore_continues_identically():
    s = _trained_digits(20)               # mid-epoch: the restored order must match too
    s.add_samples(np.full((2, 784), 0.5, np.float32), [3, 4])
    snap = json.loads(json.dumps(bridge._encode(s.snapshot(), [])))  # meta must survive JSON
    full = s.snapshot()
    r = webapp.Session()
    res = r.restore(snap["meta"], full["artifacts"], full["checkpoint"], full["data"], digits_blob())
    assert res["digest"] == s.digest() and res["step"] == 20 and r.data_summary()["added"] == 2
    a = s.train_for(budget_ms=1e9, max_steps=10)["losses"]
    b = r.train_for(budget_ms=1e9, max_steps=10)["losses"]
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert s.digest() == r.digest()


def test_csv_mlp_standardizes_inside_the_model():
    s = webapp.Session()
    info = s.inspect_csv(_iris_text())
    assert info["label"] == "species" and info["numeric"] == [True] * 4 + [False]
    data = s.use_csv(_iris_text(), "species")
    assert (data["train"], data["val"], data["classes"]) == (120, 30, ["setosa", "versicolor", "virginica"])
    s.build_mlp([16])
    s.configure(batch_size=16, lr=0.01)
    for _ in range(25):
        s.train_for(budget_ms=1e9)
    assert s.evaluate()["metric"] >= 0.9
    # The exported model takes raw rows: the standardizer is part of the graph, not of the page.
    assert s.predict(np.array([5.1, 3.5, 1.4, 0.2], np.float32))["label"] == ["setosa"]
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(s.export(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"input": np.array([[6.7, 3.0, 5.2, 2.3]], np.float32)})[0]
    assert int(np.argmax(out)) == 2


def test_csv_regression_reports_rmse():
    rng = np.random.RandomState(1)
    x = rng.rand(200, 3)
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3
    text = "x1,x2,x3,y\n" + "".join("%f,%f,%f,%f\n" % (*r, t) for r, t in zip(x, y))
    s = webapp.Session()
    assert s.use_csv(text, "y")["task"] == "regression"
    s.build_mlp([16])
    s.configure(batch_size=16, lr=0.01)
    first = None
    for _ in range(20):
        s.train_for(budget_ms=1e9)
        ev = s.evaluate()
        first = first if first is not None else ev["metric"]
    assert ev["metric_name"] == "rmse" and ev["metric"] < first and ev["metric"] < 0.3


def test_call_bridge_reports_user_errors_without_raising():
    s = webapp.Session()
    text, blobs = webapp.call(s, "use_csv", json.dumps({"text": "a,b\n1,x\n2,3\n", "label": "a"}))
    reply = json.loads(text)
    assert reply["ok"] is False and reply["error"]["expected"] is True
    assert "'x' is not a number" in reply["error"]["message"]
    reply = json.loads(webapp.call(s, "use_csv", json.dumps({"text": "a,b\n1,2\n3,4\n", "label": "zzz"}))[0])
    assert "label column 'zzz' not found" in reply["error"]["message"]
    reply = json.loads(webapp.call(s, "inspect_model", json.dumps({"blob": {"$blob": 0}, "name": "m.onnx"}),
                                   [b"\x07garbage"])[0])
    assert reply["error"]["type"] == "ModelFormatError" and reply["error"]["message"].startswith("m.onnx (8 bytes) is not a valid ONNX file")
    reply = json.loads(webapp.call(s, "train_for", "{}")[0])
    assert "no model yet" in reply["error"]["message"]
    reply = json.loads(webapp.call(s, "_need_data", "{}")[0])
    assert reply["error"]["type"] == "WebappError"


def test_call_bridge_moves_arrays_and_bytes():
    s = _trained_digits(5)
    x = np.zeros((2, 784), np.float32)
    text, blobs = webapp.call(s, "predict", json.dumps({"x": {"$blob": 0, "dtype": "<f4", "shape": [2, 784]}}),
                              [x.tobytes()])
    assert len(json.loads(text)["result"]["class"]) == 2 and blobs == []
    text, blobs = webapp.call(s, "export")
    assert json.loads(text)["result"] == {"$blob": 0} and blobs[0].dtype == np.uint8 and blobs[0].size > 1000


def test_ready_made_artifacts_are_usable():
    arts = webapp.digits_artifacts("mlp")
    s = webapp.Session()
    s.use_digits(digits_blob(), 500, 100)
    info = s.use_artifacts(arts["training"], arts["eval"], arts["optimizer"], arts["checkpoint"])
    assert info["input"] == "input" and info["output"] == "output" and info["loss"] == "CrossEntropyLoss"
    s.train_for(budget_ms=1e9, max_steps=3)
    assert s.run.at.step == 3
