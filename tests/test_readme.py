"""The README's Python examples run as written."""
from __future__ import annotations

import os
import re
from pathlib import Path

import onnxruntime as ort

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_examples_run(tmp_path, monkeypatch):
    blocks = _python_blocks()
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert sorted(os.listdir(tmp_path / "artifacts")) == [
        "checkpoint", "eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"]
    x = namespace["x"]
    logits = ort.InferenceSession(str(tmp_path / "digits.onnx")).run(None, {"input": x})[0]
    assert (logits.argmax(axis=1) == namespace["y"]).mean() > 0.9
    assert float(namespace["loss"]) < 1.0
