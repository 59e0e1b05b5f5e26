"""What ``python build.py test`` installs (test packages, torchvision, chromium) before running the suite."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Sequence

from buildsite.paths import BUILD, ROOT, log
from buildsite.pyodide import ensure_node_modules
from buildsite.site import build, needs_build



#: what the test suite needs from PyPI (torch 2.13.0 is the CPU build this machine provides)
TEST_REQUIREMENTS = ["numpy", "onnx", "onnxruntime", "scikit-learn", "pytest", "vermin", "playwright",
                     "Pillow", "torch==2.13.0", "onnxscript", "transformers", "peft",
                     "brotli"]  # the site's .br twins (buildsite/compress.py) and the server tests that decode them
#: torchvision's model definitions for tests/training/test_architectures.py, installed with --no-deps so that
#: pip keeps torch 2.13.0's CPU build (its C ops do not load beside it; tests/helpers/torch_zoo.py copes)
TORCHVISION = "torchvision==0.28.0"


def _missing_modules(modules: Iterable[str]) -> List[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]


def ensure_python_packages(requirements: Iterable[str], modules: Iterable[str]) -> None:
    """pip-install ``requirements`` unless every module in ``modules`` already imports."""
    if _missing_modules(modules):
        log("installing Python packages: %s" % " ".join(requirements))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q"] + list(requirements), check=True)


def ensure_chromium() -> None:
    """Debian's chromium for the browser tests (playwright cannot download its own here)."""
    if Path("/usr/bin/chromium").exists():
        return
    if shutil.which("apt-get") is None:
        log("no /usr/bin/chromium and no apt-get: the browser tests will be skipped")
        return
    log("installing Debian's chromium for the browser tests")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-q"], check=True)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-q", "chromium"], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


#: onnxruntime-web 1.19's public types (and its Tensor.fromImage, the browser tests' oracle) and the compiler
#: that checks web/pytrain-ort.d.ts against them (tests/web/test_ort_types.py)
ORT_TYPES_NPM = {"onnxruntime-common": "1.19.2", "typescript": "5.9.3"}

#: where tests install the npm packages they need (gitignored, under build/): one folder per use
NPM_TEST_FOLDERS = BUILD / "npm"


def npm_install(folder: Path, no_save: Sequence[str] = ()) -> None:
    """``npm install`` the dependencies of ``folder``'s package.json from the registry (again only when
    package.json changes), then ``npm install --no-save`` the ``no_save`` specs (packages or folders) into it."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed: install Node.js/npm to install the packages of %s" % folder)
    manifest = (folder / "package.json").read_text(encoding="utf-8")
    done = folder / "node_modules" / ".pytrain-installed"
    if not (done.is_file() and done.read_text(encoding="utf-8") == manifest):
        log("npm install in %s" % folder)
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=str(folder), check=True)
        done.write_text(manifest, encoding="utf-8")
    if no_save:
        subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"] + list(no_save),
                       cwd=str(folder), check=True)


def ensure_npm_folder(name: str, dependencies: Dict[str, str]) -> Path:
    """``build/npm/<name>/`` with exactly ``dependencies`` ({package: pinned version}) npm-installed from
    the registry; reinstalled when the pins change. Returns the folder (its node_modules inside)."""
    folder = NPM_TEST_FOLDERS / name
    manifest = json.dumps({"name": "pytrain-test-" + name, "private": True, "dependencies": dependencies},
                          indent=2, sort_keys=True) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    pkg = folder / "package.json"
    if not pkg.is_file() or pkg.read_text(encoding="utf-8") != manifest:
        pkg.write_text(manifest, encoding="utf-8")
    npm_install(folder)
    return folder


def run_tests(pytest_args: List[str]) -> int:
    """Install what the suite needs, build the site, run every test (browser tests included)."""
    ensure_python_packages(TEST_REQUIREMENTS, ["numpy", "onnx", "onnxruntime", "sklearn", "pytest",
                                               "vermin", "playwright", "PIL", "torch", "onnxscript",
                                               "transformers", "peft", "brotli"])
    if _missing_modules(["torchvision"]):
        log("installing %s (--no-deps)" % TORCHVISION)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", TORCHVISION], check=True)
    ensure_chromium()
    ensure_node_modules()
    if needs_build():
        build()
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + pytest_args,
                           cwd=str(ROOT))
