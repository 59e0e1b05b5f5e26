"""The README's Python examples, and those of the docs pages it sends readers to, run as written (in one
namespace, in reading order: the pages build on the README's ten lines)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: the pages whose Python blocks run after the README's, in this order
DOCS = [ROOT / "docs" / name for name in ("models.md", "lora.md", "ort.md")]


def _python_blocks(path: Path):
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_readme_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for page in [README] + DOCS:
        blocks = _python_blocks(page)
        assert blocks, "%s has no Python example" % page.name
        for code in blocks:
            exec(compile(code, str(page), "exec"), namespace)  # noqa: S102 - our own README and docs
    assert sorted(os.listdir(tmp_path / "artifacts")) == [
        "checkpoint", "eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"]
    x = namespace["x"]
    logits = ort.InferenceSession(str(tmp_path / "digits.onnx")).run(None, {"input": x})[0]
    assert (logits.argmax(axis=1) == namespace["y"]).mean() > 0.9
    assert float(namespace["loss"]) < 1.0
