"""The kernel index (pytrain/ops/kernel_index.py): current with the kernels the modules register, and a plan's
lookup imports its own nodes' modules only, falling back to every module for an op the index does not name."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pytrain.ops import registry

ROOT = Path(__file__).resolve().parents[2]


def test_the_index_is_current():
    text = (ROOT / "pytrain" / "ops" / "kernel_index.py").read_text(encoding="utf-8")
    assert text == registry.kernel_index_source(), (
        "pytrain/ops/kernel_index.py is out of date: write registry.kernel_index_source() into it")


_PROBE = r"""
import json, sys
from pytrain.ops import get_kernel, supported_ops
gemm = get_kernel("Gemm")
first = sorted(m for m in sys.modules if ".op_" in m)
missing = get_kernel("NoSuchOp")
after = sorted(m for m in sys.modules if ".op_" in m)
print(json.dumps({"gemm": gemm.numpy_fn.__module__, "first": first, "missing": missing is None,
                  "after": len(after), "adam": get_kernel("AdamStep", "ai.pytrain") is not None,
                  "supported": len(supported_ops(""))}))
"""


def test_a_lookup_imports_its_module_only():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=str(ROOT), check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["gemm"] == "pytrain.ops.nn.op_gemm"
    assert got["first"] == ["pytrain.ops.nn.op_gemm"]
    # an op the index does not name: every module is imported and the answer is still None
    assert got["missing"] and got["after"] > 100
    assert got["adam"]
    registry._load_all()
    assert got["supported"] == len(registry.supported_ops(""))
