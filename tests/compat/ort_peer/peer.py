"""Where ONNX Runtime's peer tests are, and how the kept diffs (``*.diff`` here) apply to them.

The tests are ORT's own files (``../shared/peer-tests/onnxruntime-training`` next to the
checkout, read-only; ``PYTRAIN_ORT_PEER_TESTS`` overrides). They are never copied into the
project: a test copies them to a temporary folder, applies the kept diff of a file if there is
one, and runs them there.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import List, Optional

#: ORT test id -> why it cannot apply to pytrain (a numpy runtime on the CPU); ort_swap skips these
NOT_APPLICABLE = {
    "test_cuda_execution_provider": "needs CUDA (ORT's CUDA execution provider)",
    "test_get_and_set_parameter_values[cuda]": "needs CUDA (Module(device='cuda'))",
    "test_ort_custom_ops": "needs ORT's compiled custom-op test library (libcustom_op_library.so)",
    "test_save_ort_format": "needs the ORT flatbuffer model format (.ort files)",
}

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def peer_dir() -> Optional[Path]:
    d = Path(os.environ.get("PYTRAIN_ORT_PEER_TESTS", REPO.parent / "shared" / "peer-tests" / "onnxruntime-training"))
    return d if (d / "SOURCES.md").is_file() else None


def apply_unified_diff(text: str, diff: str) -> str:
    """``text`` with the hunks of a unified diff applied; each hunk's context must match exactly."""
    lines = text.splitlines(keepends=True)
    out: List[str] = []
    pos = 0
    dl = diff.splitlines(keepends=True)
    i = 0
    while i < len(dl):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", dl[i])
        if not m:
            i += 1
            continue
        start = int(m.group(1)) - 1
        out.extend(lines[pos:start])
        pos = start
        i += 1
        while i < len(dl) and not dl[i].startswith("@@"):
            tag, body = dl[i][:1], dl[i][1:]
            if tag in (" ", "-"):
                if pos >= len(lines) or lines[pos].rstrip("\n") != body.rstrip("\n"):
                    raise ValueError("the diff does not apply at line %d: expected %r" % (pos + 1, body))
                if tag == " ":
                    out.append(lines[pos])
                pos += 1
            elif tag == "+":
                out.append(body if body.endswith("\n") else body + "\n")
            i += 1
    out.extend(lines[pos:])
    return "".join(out)


def copy_with_diffs(src: Path, dst: Path, names: List[str]) -> List[Path]:
    """Copy ``names`` from ``src`` to ``dst``, applying ``HERE/<stem>.diff`` where it exists."""
    paths = []
    for name in names:
        target = dst / name
        diff = HERE / (Path(name).stem + ".diff")
        if diff.is_file():
            target.write_text(apply_unified_diff((src / name).read_text(), diff.read_text()))
        else:
            shutil.copyfile(src / name, target)
        paths.append(target)
    return paths
