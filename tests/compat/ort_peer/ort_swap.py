"""pytest plugin: ONNX Runtime's on-device training tests run against pytrain.ort.

``onnxruntime.training`` and its submodules become ``pytrain.ort``'s, while the real
``onnxruntime`` (the inference package) stays the tests' oracle. Tests that cannot apply to a
numpy runtime are skipped by name, with the reason (docs/ort.md, "Coming from ONNX Runtime").
Use: ``pytest -p ort_swap ...`` with this folder on PYTHONPATH.
"""
import sys

import onnxruntime

import pytrain.ort
import pytrain.ort.api
import pytrain.ort.artifacts
import pytrain.ort.onnxblock
import pytrain.ort.onnxblock.blocks
import pytrain.ort.onnxblock.loss
import pytrain.ort.onnxblock.optim

for name in ("", ".api", ".artifacts", ".onnxblock", ".onnxblock.blocks", ".onnxblock.loss", ".onnxblock.optim"):
    sys.modules["onnxruntime.training" + name] = sys.modules["pytrain.ort" + name]
onnxruntime.training = pytrain.ort

from peer import NOT_APPLICABLE  # noqa: E402  (the skip list, kept where importing has no side effect)


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        why = NOT_APPLICABLE.get(item.name)
        if why:
            item.add_marker(pytest.mark.skip(reason="not applicable to pytrain: " + why))
