"""Everything under pytrain/ must run on the browser's Python 3.8 (Pyodide 0.17)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "pytrain"


def test_vermin_finds_nothing_newer_than_python38():
    exe = shutil.which("vermin")
    if exe is None:
        pytest.fail("vermin is not installed (python build.py test installs it)")
    r = subprocess.run([exe, "-t=3.8-", "--no-tips", "--violations", "--eval-annotations", str(PKG)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_module_uses_postponed_annotations():
    missing = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if p.read_text(encoding="utf-8").strip() and "from __future__ import annotations" not in p.read_text(encoding="utf-8")]
    assert missing == []
