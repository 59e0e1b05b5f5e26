"""pytest plugin: ONNX Runtime's on-device training tests run against pytrain.ort.

``onnxruntime.training`` and its submodules become ``pytrain.ort``'s, while the real
``onnxruntime`` (the inference package) stays the tests' oracle. Tests that cannot apply to a
numpy runtime are skipped by name, with the reason (README, "Coming from ONNX Runtime").
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

#: test id -> why it cannot apply to pytrain (a numpy runtime on the CPU)
NOT_APPLICABLE = {
    "test_cuda_execution_provider": "needs CUDA (ORT's CUDA execution provider)",
    "test_get_and_set_parameter_values[cuda]": "needs CUDA (Module(device='cuda'))",
    "test_ort_custom_ops": "needs ORT's compiled custom-op test library (libcustom_op_library.so)",
    "test_save_ort_format": "needs the ORT flatbuffer model format (.ort files)",
}


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        why = NOT_APPLICABLE.get(item.name)
        if why:
            item.add_marker(pytest.mark.skip(reason="not applicable to pytrain: " + why))
