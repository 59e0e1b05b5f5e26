"""The pure ``py3-none-any`` wheel of the pytrain package, written with zipfile."""
from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path
from typing import Dict, List, Tuple

from buildsite.paths import DIST, ROOT, log



def pytrain_version() -> str:
    """The version string declared in pytrain/base/version.py."""
    text = (ROOT / "pytrain" / "base" / "version.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    if not m:
        raise SystemExit("pytrain/base/version.py has no __version__ = '...' line")
    return m.group(1)


def _pyproject() -> Dict[str, object]:
    """The [project] table of pyproject.toml ({} when absent or unreadable on this Python)."""
    path = ROOT / "pyproject.toml"
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return {}
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f).get("project", {})


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def build_wheel(out_dir: Path = DIST) -> Path:
    """Write a pure ``py3-none-any`` wheel of the ``pytrain`` package.

    Written with zipfile rather than pip so the build needs no network, no build
    backend and gives byte-identical output for identical sources (fixed timestamps).
    """
    version = pytrain_version()
    name = "pytrain-%s-py3-none-any.whl" % version
    dist_info = "pytrain-%s.dist-info" % version
    files: List[Tuple[str, bytes]] = []
    pkg = ROOT / "pytrain"
    for path in sorted(pkg.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        files.append((path.relative_to(ROOT).as_posix(), path.read_bytes()))
    project = _pyproject()
    lines = ["Metadata-Version: 2.1", "Name: pytrain", "Version: " + version,
             "Summary: " + project.get("description", "On-device training for ONNX models"),
             "Requires-Python: " + project.get("requires-python", ">=3.8")]
    lines += ["Requires-Dist: " + dep for dep in project.get("dependencies", ["numpy>=1.17"])]
    metadata = ("\n".join(lines) + "\n").encode()
    scripts = project.get("scripts", {})
    if scripts:
        entry = "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items()))
        files.append((dist_info + "/entry_points.txt", entry.encode()))
    wheel_meta = b"Wheel-Version: 1.0\nGenerator: pytrain-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files.append((dist_info + "/METADATA", metadata))
    files.append((dist_info + "/WHEEL", wheel_meta))
    files.append((dist_info + "/top_level.txt", b"pytrain\n"))
    record = "".join("%s,%s,%d\n" % (n, _record_hash(d), len(d)) for n, d in files)
    record += dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode()))

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / name
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    tmp.replace(target)
    log("wheel %s (%d files)" % (target.relative_to(ROOT), len(files)))
    return target
