"""ONNX Runtime's own on-device training tests, run against pytrain.ort.

``orttraining_test_ort_apis_onnxblock.py`` and ``orttraining_test_ort_apis_py_bindings.py``
(unmodified copies from ORT's main branch, see SOURCES.md next to them) run in a pytest
subprocess with the ``ort_swap`` plugin (tests/compat/ort_peer/ort_swap.py): ``onnxruntime.training``
is pytrain.ort, the real ``onnxruntime`` inference package stays the tests' oracle. The one kept
diff (tests/compat/ort_peer/orttraining_test_ort_apis_onnxblock.diff) makes the device "cuda" of the
onnxblock tests, used only as a torch device, "cpu", and passes ``dynamo=False`` to
``torch.onnx.export`` (torch >= 2.9's default exporter is another). The tests that need CUDA,
ORT's custom-op library or ORT's flatbuffer model format are skipped by name (ort_swap.py).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "ort_peer"))
import peer  # noqa: E402
from peer import NOT_APPLICABLE  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

FILES = ["orttraining_test_ort_apis_onnxblock.py", "orttraining_test_ort_apis_py_bindings.py"]
#: tests in the two files once parametrized; all but the NOT_APPLICABLE ones must pass
TOTAL = 87


@pytest.mark.skipif(peer.peer_dir() is None, reason="ORT's peer tests (../shared/peer-tests) are not here")
def test_ort_peer_tests_pass(tmp_path):
    files = peer.copy_with_diffs(peer.peer_dir(), tmp_path, FILES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(peer.REPO), str(peer.HERE)]))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "ort_swap", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, "-W", "ignore"] + [str(f) for f in files],
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        timeout=1800)
    out = proc.stdout
    summary = out.strip().splitlines()[-1]
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|xfailed)", summary)}
    assert proc.returncode == 0, out[-6000:]
    assert counts.get("skipped", 0) == len(NOT_APPLICABLE), out[-3000:]
    assert counts.get("passed", 0) == TOTAL - len(NOT_APPLICABLE), summary
    for why in NOT_APPLICABLE.values():
        assert why in out
