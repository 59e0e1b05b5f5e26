"""pytrain.run.rows: a table's export takes its rows as typed (text columns as strings, NaN for a
missing number), and onnxruntime, pytrain's runtime and the page's Try agree on it; the answer is
the one the model gives the encoded features (one-hot 0/1, the fill mean)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pytrain import webapp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from test_runfile_resume import _table  # noqa: E402

ort = pytest.importorskip("onnxruntime")


def _trained(classify: bool, missing: str) -> webapp.Session:
    s = webapp.Session()
    s.use_csv(_table(classify=classify), "kind" if classify else "target", exclude=["id"], missing=missing, onehot=True)
    s.build_mlp(hidden=[8], standardize=True)
    while s.run.at.step < 20:
        s.train_for(budget_ms=1e9, max_steps=20 - s.run.at.step)
    return s


@pytest.mark.parametrize("classify,missing", [(True, "fill"), (False, "fill"), (False, "drop")])
def test_export_takes_raw_rows_like_try(classify, missing):
    s = _trained(classify, missing)
    cols = s.data_summary()["columns"]
    assert [(c["name"], c["kind"]) for c in cols] == [("a", "number"), ("b", "number"), ("color", "text"), ("c", "number")]
    fills = [c["fill"] for c in s.source.data["columns"] if c["kind"] == "number"]
    sess = ort.InferenceSession(s.export(), providers=["CPUExecutionProvider"])
    typed = [["0.5", "", "red", "0.25"], ["-1", "7.5", "blue", "NA"], ["2", "3", "purple", "0.5"]]
    for row in typed:
        page = np.asarray(s.predict(row=row)["outputs"], np.float32)
        nums = np.array([[np.nan if v in ("", "NA") else float(v) for v in (row[0], row[1], row[3])]], np.float32)
        got = sess.run(None, {"input": nums, "text": np.array([[row[2]]], dtype=object)})[0]
        np.testing.assert_allclose(got, page, rtol=1e-5, atol=1e-5)
        # the same as the encoded features: the fill mean for a missing number, the color's 0/1 columns
        filled = np.where(np.isnan(nums[0]), fills, nums[0])
        hot = [float(row[2] == v) for v in ("blue", "green", "red")]
        encoded = np.array([[filled[0], filled[1]] + hot + [filled[2]]], np.float32)
        np.testing.assert_allclose(np.asarray(s.predict(x=encoded)["outputs"]), page, rtol=1e-5, atol=1e-5)


def test_a_table_of_numbers_exports_as_before():
    s = webapp.Session()
    s.use_csv("a,b,y\n" + "\n".join("%d,%d,%d" % (i, i % 3, i % 2) for i in range(40)), "y")
    s.build_mlp(hidden=[4])
    assert s.data_summary()["columns"] is None
    sess = ort.InferenceSession(s.export(), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in sess.get_inputs()] == [("input", "tensor(float)")]
    got = sess.run(None, {"input": np.array([[3, 1]], np.float32)})[0]
    np.testing.assert_allclose(got, s.predict(row=["3", "1"])["outputs"], rtol=1e-5, atol=1e-6)


def test_a_row_that_does_not_fit_says_what_to_type():
    s = _trained(True, "fill")
    with pytest.raises(Exception, match=r"Type 4 values separated by commas, one per column \(a, b, color, c\)"):
        s.predict(row=["1", "2"])
    with pytest.raises(Exception, match=r"Column 'b' takes a number, not 'red' \(leave it empty"):
        s.predict(row=["1", "red", "red", "1"])


def test_a_run_file_taken_back_still_exports_raw_rows():
    s = _trained(True, "fill")
    back = webapp.Session()
    res = back.use_artifact_files({"run.zip": s.run_file()})
    assert [c["name"] for c in res["data"]["columns"]] == ["a", "b", "color", "c"]
    row = ["0.5", "", "red", "0.25"]
    np.testing.assert_allclose(back.predict(row=row)["outputs"], s.predict(row=row)["outputs"], rtol=1e-6)
    sess = ort.InferenceSession(back.export(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": np.array([[0.5, np.nan, 0.25]], np.float32), "text": np.array([["red"]], object)})[0]
    np.testing.assert_allclose(got, s.predict(row=row)["outputs"], rtol=1e-5, atol=1e-5)
